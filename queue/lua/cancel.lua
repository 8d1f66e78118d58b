-- cancel stops a job on a user's request. A queued job is STOPPED at once. A job an agent
-- holds is marked (job.stopping): its next heartbeat is answered "stop", and it becomes STOPPED
-- when the agent confirms or when its grace ends. Stopping a stopped job is a no-op; a stop
-- also cancels a pending restart.
-- KEYS[1] the job's hash (routes the call)
-- arg_grace ms
-- Returns the job's status; errors NOT_FOUND, CONFLICT <status>.
local id = arg_id
local key = jobkey(id)
local cur = redis.call('HMGET', key, F.status, F.stop_requested, F.org, F.class, F.ready_at, F.kind)
local status, org = cur[1], cur[3]
if not status then
  return redis.error_reply('NOT_FOUND no such job')
end
if status == 'QUEUED' then
  if cur[5] then
    redis.call('ZREM', DELAYED, id)
    redis.call('HDEL', key, F.ready_at)
  else
    unqueue(id, org, cur[4])
  end
  redis.call('HINCRBY', orgkey(org), 'queued', -1)
  finish_as(id, org, cur[6], 'STOPPED', 'job.stopped', 'stopped by user before it started')
elseif is_live(status) then
  redis.call('HDEL', key, F.restart_requested)
  if cur[2] ~= '1' then
    local deadline = NOW + tonumber(arg_grace)
    redis.call('HSET', key, F.stop_requested, 1, F.stop_reason, 'user', F.stop_deadline, deadline, F.updated_at, T)
    redis.call('ZADD', STOPPING, deadline, id)
    emit(id, org, 'job.stopping', status, 'stop requested by user')
  end
elseif status ~= 'STOPPED' then
  return redis.error_reply('CONFLICT ' .. status)
end
return redis.call('HGET', key, F.status)
