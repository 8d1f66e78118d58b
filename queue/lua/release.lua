-- release hands a job back from an agent that is going away (a preempted or drained node):
-- it goes back to its place in the queue at once, to resume from its newest checkpoint
-- elsewhere, without spending an attempt. A job that was told to stop stops; one told to
-- restart restarts.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] reason  ARGV[7] progress JSON or ""
-- ARGV[8..] committed checkpoint steps, ascending
-- Returns the job's status; error LEASE_LOST if the token is not the current one.
local id = ARGV[4]
local key = jobkey(id)
local cur = redis.call('HMGET', key, 'lease_token', 'status', 'stop_requested', 'org',
  'restart_requested', 'class', 'rank', 'agent_id')
if cur[1] ~= ARGV[5] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local org = cur[4]
if ARGV[7] ~= '' then
  redis.call('HSET', key, 'progress', ARGV[7])
end
checkpoints(id, org, cur[2], 8)
release(id)
if cur[3] == '1' then
  if cur[5] == '1' then
    restart_job(id, org)
    return 'QUEUED'
  end
  finish_as(id, org, 'STOPPED', 'job.stopped', 'stopped on request')
  return 'STOPPED'
end
local step = redis.call('HGET', key, 'checkpoint_step')
redis.call('HSET', key, 'resume_step', tonumber(step) or 0)
requeue(id, org, cur[6], tonumber(cur[7]), 0)
local detail = 'released by ' .. (cur[8] or 'its agent') .. ' (' .. ARGV[6] .. ')'
if step then
  detail = detail .. '; resumes from the checkpoint of step ' .. step
end
emit(id, org, 'job.retrying', 'QUEUED', detail)
return 'QUEUED'
