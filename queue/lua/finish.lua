-- finish ends a job its agent holds: COMPLETED, or FAILED with a reason. A failure that follows
-- a stop request is the stop taking effect: the job is STOPPED (FAILED if its time limit asked
-- for the stop), or queued again if the request was a restart.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] "completed" | "failed"  ARGV[7] reason
-- ARGV[8] progress JSON or ""  ARGV[9..] committed checkpoint steps, ascending
-- Returns the job's status; error LEASE_LOST if the token is not the current one.
local id = ARGV[4]
local key = jobkey(id)
local cur = redis.call('HMGET', key, 'lease_token', 'status', 'stop_requested', 'org',
  'stop_reason', 'restart_requested')
if cur[1] ~= ARGV[5] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local org = cur[4]
if ARGV[8] ~= '' then
  redis.call('HSET', key, 'progress', ARGV[8])
end
checkpoints(id, org, cur[2], 9)
release(id)
if ARGV[6] == 'completed' then
  finish_as(id, org, 'COMPLETED', 'job.completed', '')
  return 'COMPLETED'
end
if cur[3] == '1' then
  if cur[6] == '1' then
    restart_job(id, org)
    return 'QUEUED'
  elseif cur[5] == 'time_limit' then
    finish_as(id, org, 'FAILED', 'job.failed', 'stopped at its time limit')
    return 'FAILED'
  end
  finish_as(id, org, 'STOPPED', 'job.stopped', 'stopped on request')
  return 'STOPPED'
end
finish_as(id, org, 'FAILED', 'job.failed', ARGV[7])
return 'FAILED'
