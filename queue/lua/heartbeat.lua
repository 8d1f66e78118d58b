-- heartbeat renews a lease, records progress, charges the GPU time used since the last charge,
-- moves PENDING to RUNNING when the agent says the pipeline runs (starting the time limit's
-- clock), and emits job.checkpoint for each newly committed checkpoint step.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] lease TTL (ms)  ARGV[7] "1" if running
-- ARGV[8] progress JSON or ""  ARGV[9] pipeline or ""  ARGV[10] "1" if emulated
-- ARGV[11..] committed checkpoint steps, ascending
-- Returns {action, lease expiry ms}; error LEASE_LOST if the token is not the current one.
local id = ARGV[4]
local key = jobkey(id)
local cur = redis.call('HMGET', key, 'lease_token', 'status', 'stop_requested', 'org',
  'started_at', 'gpus', 'charged_until', 'time_limit_ms')
if cur[1] ~= ARGV[5] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local org, status = cur[4], cur[2]
local exp = NOW + tonumber(ARGV[6])
redis.call('HSET', key, 'lease_expires', exp, 'updated_at', NOW)
redis.call('ZADD', LEASES, exp, id)
if ARGV[8] ~= '' then
  redis.call('HSET', key, 'progress', ARGV[8])
end
if ARGV[9] ~= '' then
  redis.call('HSET', key, 'pipeline', ARGV[9], 'emulated', ARGV[10])
end
if ARGV[7] == '1' and status == 'PENDING' then
  status = 'RUNNING'
  redis.call('HSET', key, 'status', status)
  if not cur[5] then
    redis.call('HSET', key, 'started_at', NOW)
  end
  local limit = tonumber(cur[8]) or 0
  if limit > 0 then
    redis.call('ZADD', DEADLINES, NOW + limit, id)
  end
  emit(id, org, 'job.started', status, '')
end
local since = tonumber(cur[7]) or NOW
if NOW > since then
  charge(org, (tonumber(cur[6]) or 0) * (NOW - since))
  redis.call('HSET', key, 'charged_until', NOW)
end
checkpoints(id, org, status, 11)
if cur[3] == '1' then
  return {'stop', exp}
end
return {'continue', exp}
