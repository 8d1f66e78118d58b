-- finish ends a job its agent holds: COMPLETED, or FAILED with a reason. A failure that follows
-- a stop request is the stop taking effect: the job is STOPPED (FAILED if its time limit asked
-- for the stop), or queued again if the request was a restart.
-- KEYS[1] the job's hash (routes the call)
-- arg_how "completed" | "failed"; arg_progress JSON or ""; arg_freed_at when the job's GPUs
-- were given back (ms) or ""; ARGV[REST..] committed checkpoint steps, ascending.
-- Returns the job's status; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = arg_id
local j = jobfields(id, {'lease_token', 'status', 'stop_requested', 'org', 'stop_reason',
  'restart_requested', 'gpus', 'charged_until', 'time_limit_ms', 'held_since', 'gpu_ms', 'kind'})
if j.lease_token ~= arg_token or not is_live(j.status) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local beyond = steps_beyond(id, REST)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
local org = j.org
if arg_progress ~= '' then
  redis.call('SET', progkey(id), arg_progress)
end
checkpoints(id, org, j.status, REST, nil, true)
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
  else
    status, typ, detail = 'STOPPED', 'job.stopped', 'stopped on request'
  end
end
release(id, j, ended_fields(status, detail))
index_job(id, org, j.kind, status)
mark_ended(id, org)
emit(id, org, typ, status, detail, j.hooked)
return status
