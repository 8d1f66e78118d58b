-- cancel stops a job on a user's request. A queued job is STOPPED at once; a job an agent holds
-- is marked so that the agent's next heartbeat is answered "stop" (job.stopping), and it
-- becomes STOPPED when the agent confirms or its lease runs out. Stopping a stopped job is a
-- no-op.
-- KEYS[1] job hash  KEYS[2] job events  KEYS[3] outbox  KEYS[4] queued zset
-- ARGV[1] now (ms)
-- Returns the job hash as a flat array; errors NOT_FOUND, or CONFLICT <status> for a job that
-- already completed or failed.
local cur = redis.call('HMGET', KEYS[1], 'status', 'stop_requested', 'org', 'id')
local status, now, org, id = cur[1], ARGV[1], cur[3], cur[4]
if not status then
  return redis.error_reply('NOT_FOUND no such job')
end
if status == 'QUEUED' then
  redis.call('ZREM', KEYS[4], id)
  redis.call('HSET', KEYS[1], 'status', 'STOPPED', 'finished_at', now, 'updated_at', now)
  emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.stopped', 'STOPPED', now, 'stopped by user before it started')
elseif is_live(status) then
  if cur[2] ~= '1' then
    redis.call('HSET', KEYS[1], 'stop_requested', 1, 'updated_at', now)
    emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.stopping', status, now, 'stop requested by user')
  end
elseif status ~= 'STOPPED' then
  return redis.error_reply('CONFLICT ' .. status)
end
return redis.call('HGETALL', KEYS[1])
