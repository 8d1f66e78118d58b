-- heartbeat renews a lease (in the job's hash; see LEASES), records progress, charges the GPU time used since the last charge,
-- moves PENDING to RUNNING when the agent says the pipeline runs (starting the time limit's
-- clock), and emits job.checkpoint for newly committed checkpoint steps (see checkpoints).
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] the renewed lease's expiry (ms)  ARGV[7] "1" if running
-- ARGV[8] progress JSON or ""  ARGV[9] pipeline or ""  ARGV[10] "1" if emulated
-- ARGV[11] the upstream versions the agent runs (JSON) or ""
-- ARGV[12..] committed checkpoint steps, ascending
-- Returns {action, lease expiry ms}; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = ARGV[4]
local key = jobkey(id)
local cur = redis.call('HMGET', key, 'lease_token', 'status', 'stop_requested', 'org',
  'started_at', 'gpus', 'charged_until', 'time_limit_ms', 'step_backlog')
if cur[1] ~= ARGV[5] or not is_live(cur[2]) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local beyond = steps_beyond(id, 12)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
local org, status = cur[4], cur[2]
local exp = ARGV[6]
local since = tonumber(cur[7]) or NOW
local fields = {'lease_expires', exp, 'updated_at', T}
if NOW > since then
  fields[#fields + 1], fields[#fields + 2] = 'charged_until', T
end
if ARGV[8] ~= '' then
  redis.call('SET', progkey(id), ARGV[8])
end
if ARGV[9] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'pipeline', ARGV[9]
  fields[#fields + 1], fields[#fields + 2] = 'emulated', ARGV[10]
end
if ARGV[11] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'upstream', ARGV[11]
end
local starts = ARGV[7] == '1' and status == 'PENDING'
if starts then
  status = 'RUNNING'
  fields[#fields + 1], fields[#fields + 2] = 'status', status
  if not cur[5] then
    fields[#fields + 1], fields[#fields + 2] = 'started_at', T
  end
end
redis.call('HSET', key, unpack(fields))
-- The leases index is not touched: the reaper re-files this job when its old expiry comes due.
if starts then
  local limit = tonumber(cur[8]) or 0
  if limit > 0 then
    redis.call('ZADD', DEADLINES, NOW + limit, id)
  end
  emit(id, org, 'job.started', status, '')
end
if NOW > since then
  charge(org, (tonumber(cur[6]) or 0) * (NOW - since))
end
checkpoints(id, org, status, 12, cur[9])
if cur[3] == '1' then
  return {'stop', exp}
end
return {'continue', exp}
