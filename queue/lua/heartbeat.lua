-- heartbeat renews a lease, records progress, moves PENDING to RUNNING when the agent says the
-- pipeline runs, and emits job.checkpoint for each newly committed checkpoint step.
-- KEYS[1] job hash  KEYS[2] job events  KEYS[3] outbox  KEYS[4] leases zset
-- ARGV[1] lease token  ARGV[2] now (ms)  ARGV[3] lease TTL (ms)  ARGV[4] "1" if running
-- ARGV[5] progress JSON or ""  ARGV[6] pipeline or ""  ARGV[7] "1" if emulated
-- ARGV[8..] committed checkpoint steps, ascending
-- Returns {action, lease expiry ms}; error LEASE_LOST if the token is not the current one.
local cur = redis.call('HMGET', KEYS[1], 'lease_token', 'status', 'stop_requested',
  'checkpoint_step', 'org', 'id', 'started_at')
if cur[1] ~= ARGV[1] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local now, id, org = ARGV[2], cur[6], cur[5]
local exp = tonumber(now) + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_expires', exp, 'updated_at', now)
redis.call('ZADD', KEYS[4], exp, id)
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'progress', ARGV[5])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'pipeline', ARGV[6], 'emulated', ARGV[7])
end
if ARGV[4] == '1' and cur[2] == 'PENDING' then
  redis.call('HSET', KEYS[1], 'status', 'RUNNING')
  if not cur[7] then
    redis.call('HSET', KEYS[1], 'started_at', now)
  end
  emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.started', 'RUNNING', now, '')
end
local last = tonumber(cur[4]) or 0
local status = redis.call('HGET', KEYS[1], 'status')
for i = 8, #ARGV do
  local step = tonumber(ARGV[i])
  if step > last then
    last = step
    redis.call('HSET', KEYS[1], 'checkpoint_step', step)
    emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.checkpoint', status, now, 'step ' .. step)
  end
end
local action = 'continue'
if cur[3] == '1' then
  action = 'stop'
end
return {action, exp}
