-- finish ends a job its agent holds: COMPLETED, or FAILED with a reason. A failure that follows
-- a stop request is the stop taking effect: the job is STOPPED (FAILED if its time limit asked
-- for the stop), or queued again if the request was a restart. A failure the agent read as the
-- platform's fault (arg_failure_retried not "") is retried on another node while the job has
-- attempts left (retry_attempt).
-- KEYS[1] the job's hash (routes the call)
-- arg_how "completed" | "failed"; arg_progress JSON or ""; arg_freed_at when the job's GPUs
-- were given back (ms) or ""; arg_failure the attempt's failure analysis as the job keeps it
-- when it ends (JSON, or ""), arg_failure_retried the same when it is retried; arg_backoff_base,
-- arg_backoff_cap, arg_jitter and arg_avoid_ms as reap's; arg_node_check what the agent's own
-- check of its node found where it failed with the attempt ("" otherwise: counted against the
-- node, node_fault, with arg_quarantine_after and arg_quarantine_window); ARGV[REST..]
-- committed checkpoint
-- steps, ascending.
-- Returns the job's status; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = arg_id
local j = jobfields(id, {F.lease_token, F.status, F.stop_requested, F.org, F.stop_reason,
  F.restart_requested, F.gpus, F.charged_until, F.time_limit_ms, F.held_since, F.gpu_ms, F.kind, unpack(RETRY_FIELDS)})
if lease_lost(j.lease_token, j.status, arg_token) then
  return LEASE_LOST
end
local beyond = steps_beyond(id, REST)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
local org = j.org
if arg_progress ~= '' then
  redis.call('SET', progkey(id), arg_progress)
end
j.checkpoint_step = checkpoints(id, org, j.status, REST, nil, true) or j.checkpoint_step
j.freed_at = arg_freed_at
-- What the job becomes: a stop request decides what a failure means.
local status, typ, detail = 'FAILED', 'job.failed', arg_reason
if arg_how == 'completed' then
  status, typ, detail = 'COMPLETED', 'job.completed', ''
elseif j.stop_requested == '1' then
  if j.restart_requested == '1' then
    release(id, j)
    return restart_job(id, org)
  elseif j.stop_reason == 'time_limit' then
    detail = 'stopped at its time limit'
  elseif j.stop_reason == 'budget' then
    status, typ, detail = 'STOPPED', 'job.stopped', 'stopped: its budget is spent (raise it, then restart the job)'
  elseif j.stop_reason == 'org_budget' then
    status, typ, detail = 'STOPPED', 'job.stopped',
      'stopped: its organization\'s monthly budget is spent (restart the job once it is raised or the month has ended)'
  else
    status, typ, detail = 'STOPPED', 'job.stopped', 'stopped on request'
  end
end
if arg_how == 'failed' and arg_node_check ~= '' and j.stop_requested ~= '1' then
  node_fault(j.agent_id, 'job ' .. id .. ': ' .. arg_node_check, org, 'check', tonumber(arg_quarantine_after), tonumber(arg_quarantine_window))
end
if status == 'FAILED' and j.stop_requested ~= '1' and arg_failure_retried ~= '' and (tonumber(j.attempt) or 1) < (tonumber(j.max_attempts) or 1) then
  release(id, j, {F.failure, arg_failure_retried})
  return retry_attempt(id, j, 'platform fault on ' .. (j.agent_id or 'its agent') .. ': ' .. arg_reason,
    tonumber(arg_backoff_base), tonumber(arg_backoff_cap), tonumber(arg_jitter), tonumber(arg_avoid_ms))
end
local fields = ended_fields(status, detail)
if status == 'FAILED' then
  -- The analysis of this attempt, never a retried attempt's before it: the agent's, or, for a
  -- stop at the time limit (which the agent reports as a stop), the service's own.
  local failure = arg_failure
  if failure == '' and j.stop_reason == 'time_limit' then
    failure = failure_json('time_limit', 'user', 1, "the job's time limit was reached (raise time_limit to run longer)",
      'service: the time limit passed and the run was stopped', j.attempt, false)
  end
  if failure ~= '' then
    fields[#fields + 1], fields[#fields + 2] = F.failure, failure
  else
    redis.call('HDEL', jobkey(id), F.failure)
  end
end
release(id, j, fields)
index_job(id, org, j.kind, status)
mark_ended(id, org)
emit(id, org, typ, status, detail, j.hooked)
return status
