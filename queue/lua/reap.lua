-- reap returns jobs whose lease lapsed: back to the queue with attempt + 1 (job.retrying),
-- FAILED once the attempts are spent, or STOPPED if a stop was pending.
-- KEYS[1] leases zset  KEYS[2] queued zset  KEYS[3] outbox
-- ARGV[1] key prefix  ARGV[2] now (ms)  ARGV[3] most jobs to handle  ARGV[4] wake channel
-- Returns the number of jobs handled.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local requeued = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local jobkey, evkey = prefix .. 'job:' .. id, prefix .. 'ev:' .. id
  local cur = redis.call('HMGET', jobkey, 'status', 'lease_expires', 'stop_requested',
    'attempt', 'max_attempts', 'org', 'created_at')
  if is_live(cur[1]) and tonumber(cur[2]) <= now then
    redis.call('HDEL', jobkey, 'lease_token', 'lease_expires', 'agent_id')
    redis.call('HSET', jobkey, 'updated_at', now)
    local attempt, max = tonumber(cur[4]), tonumber(cur[5])
    if cur[3] == '1' then
      redis.call('HSET', jobkey, 'status', 'STOPPED', 'finished_at', now)
      emit(jobkey, evkey, KEYS[3], id, cur[6], 'job.stopped', 'STOPPED', now,
        'stopped: the agent did not confirm before its lease ran out')
    elseif attempt >= max then
      local reason = 'lease lost ' .. attempt .. ' times (the agent stopped heartbeating); giving up'
      redis.call('HSET', jobkey, 'status', 'FAILED', 'finished_at', now, 'error', reason)
      emit(jobkey, evkey, KEYS[3], id, cur[6], 'job.failed', 'FAILED', now, reason)
    else
      redis.call('HSET', jobkey, 'status', 'QUEUED', 'attempt', attempt + 1)
      -- The job keeps its place: it was waiting before any newer job was.
      redis.call('ZADD', KEYS[2], cur[7], id)
      emit(jobkey, evkey, KEYS[3], id, cur[6], 'job.retrying', 'QUEUED', now,
        'lease expired; attempt ' .. (attempt + 1) .. ' of ' .. max)
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then
  redis.call('PUBLISH', ARGV[4], 'requeue')
end
return #ids
