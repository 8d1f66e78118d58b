-- release hands a job back from an agent that is going away (a preempted or drained node):
-- it goes back to its place in the queue at once, to resume from its newest checkpoint
-- elsewhere, without spending an attempt. A job that was told to stop stops; one told to
-- restart restarts.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] reason  ARGV[7] progress JSON or ""
-- ARGV[8..] committed checkpoint steps, ascending
-- Returns the job's status; error LEASE_LOST if the token is not the current one.
local id = ARGV[4]
local j = jobfields(id, {'lease_token', 'status', 'stop_requested', 'org', 'restart_requested',
  'class', 'rank', 'agent_id', 'gpus', 'charged_until', 'time_limit_ms'})
if j.lease_token ~= ARGV[5] or not is_live(j.status) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local org = j.org
if ARGV[7] ~= '' then
  redis.call('SET', progkey(id), ARGV[7])
end
checkpoints(id, org, j.status, 8)
release(id, j)
if j.stop_requested == '1' then
  if j.restart_requested == '1' then
    restart_job(id, org)
    return 'QUEUED'
  end
  finish_as(id, org, 'STOPPED', 'job.stopped', 'stopped on request')
  return 'STOPPED'
end
local step = redis.call('HGET', jobkey(id), 'checkpoint_step')
redis.call('HSET', jobkey(id), 'resume_step', tonumber(step) or 0)
requeue(id, org, j.class, tonumber(j.rank), 0)
local detail = 'released by ' .. (j.agent_id or 'its agent') .. ' (' .. ARGV[6] .. ')'
if step then
  detail = detail .. '; resumes from the checkpoint of step ' .. step
end
emit(id, org, 'job.retrying', 'QUEUED', detail)
return 'QUEUED'
