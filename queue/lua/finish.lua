-- finish ends a job its agent holds: COMPLETED, or FAILED with a reason — or STOPPED, when a
-- stop was requested and the pipeline ended because of it.
-- KEYS[1] job hash  KEYS[2] job events  KEYS[3] outbox  KEYS[4] leases zset
-- ARGV[1] lease token  ARGV[2] now (ms)  ARGV[3] "completed" | "failed"  ARGV[4] reason
-- ARGV[5] progress JSON or ""  ARGV[6..] committed checkpoint steps, ascending
-- Returns the job hash as a flat array; error LEASE_LOST if the token is not the current one.
local cur = redis.call('HMGET', KEYS[1], 'lease_token', 'status', 'stop_requested',
  'checkpoint_step', 'org', 'id')
if cur[1] ~= ARGV[1] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local now, id, org, reason = ARGV[2], cur[6], cur[5], ARGV[4]
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'progress', ARGV[5])
end
local last = tonumber(cur[4]) or 0
for i = 6, #ARGV do
  local step = tonumber(ARGV[i])
  if step > last then
    last = step
    redis.call('HSET', KEYS[1], 'checkpoint_step', step)
    emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.checkpoint', cur[2], now, 'step ' .. step)
  end
end
local status, typ = 'COMPLETED', 'job.completed'
if ARGV[3] ~= 'completed' then
  if cur[3] == '1' then
    status, typ, reason = 'STOPPED', 'job.stopped', 'stopped on request'
  else
    status, typ = 'FAILED', 'job.failed'
    redis.call('HSET', KEYS[1], 'error', reason)
  end
end
redis.call('HSET', KEYS[1], 'status', status, 'finished_at', now, 'updated_at', now)
redis.call('HDEL', KEYS[1], 'lease_token', 'lease_expires')
redis.call('ZREM', KEYS[4], id)
emit(KEYS[1], KEYS[2], KEYS[3], id, org, typ, status, now, reason)
return redis.call('HGETALL', KEYS[1])
