-- restart runs a job again from its newest committed checkpoint. A FAILED or STOPPED job is
-- queued at once (a fresh attempt budget, at the back of its queue). A RUNNING or PENDING job
-- is stopped first, as a user stop is, and queued again once its agent confirms or its grace
-- ends, so two runs of one job never overlap.
-- A restart counts against the org's queued limit as a submit does: refused at the limit, and a
-- held job found without room when its run has stopped ends STOPPED (restart_job).
-- A job that ended and moved to its own slot comes back to the queue's slot first: the caller
-- read it there and passes it (arg_revive "1"), and it comes back if it is still the job that
-- ended then (ENDED has it at the same time), with its events and progress, so its event
-- numbers go on.
-- KEYS[1] the job's hash (routes the call)
-- arg_grace ms; the org's queued limit is its own, else DEF_QUEUED; arg_revive "1" with a moved
-- job's record: arg_progress, arg_nfields hash fields and values from ARGV[REST], then its events.
-- Returns the job's status; errors NOT_FOUND, CONFLICT <status>, LIMIT_QUEUED <queued> <limit>,
-- DELETING for a job whose delete has begun (delete_begin); LIMIT_BYTES <bytes> <limit> where its
-- inputs, back in Redis, would pass what its org may hold.
local id = arg_id
if redis.call('EXISTS', deletingkey(id)) == 1 then
  return redis.error_reply('DELETING')
end
local key = jobkey(id)
local cur = redis.call('HMGET', key, F.status, F.stop_requested, F.org)
if not cur[1] and arg_revive == '1' then
  local n = tonumber(arg_nfields)
  local finished_at
  for i = REST, REST + n - 1, 2 do
    if ARGV[i] == F.finished_at then
      finished_at = ARGV[i + 1]
    end
  end
  local at = redis.call('ZSCORE', ENDED, id)
  if at and finished_at and tonumber(at) == tonumber(finished_at) then
    push_chunked('HSET', key, REST, REST + n - 1)
    redis.call('DEL', evkey(id), progkey(id))
    push_chunked('RPUSH', evkey(id), REST + n, #ARGV)
    if arg_progress ~= '' then
      redis.call('SET', progkey(id), arg_progress)
    end
    cur = redis.call('HMGET', key, F.status, F.stop_requested, F.org)
    -- Settled again as it was unless the restart below goes ahead (restart_job unmarks it).
    TO_SETTLE[id] = true
  end
end
local status, org = cur[1], cur[3]
if not status then
  return redis.error_reply('NOT_FOUND no such job')
end
if is_live(status) or status == 'FAILED' or status == 'STOPPED' then
  local queued, limit = over_queued_limit(org, DEF_QUEUED)
  if queued then
    return redis.error_reply('LIMIT_QUEUED ' .. queued .. ' ' .. limit)
  end
end
if status == 'FAILED' or status == 'STOPPED' then
  -- Its inputs come back to Redis (the caller put them back from object storage): counted again.
  local b = redis.call('HMGET', key, F.shed, F.cfg_bytes, F.sec_bytes)
  if b[1] == '1' then
    local need = inputs_bytes(b[2], b[3])
    local cur_bytes, max_bytes = over_bytes(org, need)
    if cur_bytes then
      return redis.error_reply('LIMIT_BYTES ' .. cur_bytes .. ' ' .. max_bytes)
    end
    hold(org, need)
    redis.call('HDEL', key, F.shed)
  end
  restart_job(id, org, DEF_QUEUED)
elseif is_live(status) then
  redis.call('HSET', key, F.restart_requested, 1, F.restart_limit, DEF_QUEUED, F.updated_at, T)
  if cur[2] ~= '1' then
    local deadline = NOW + tonumber(arg_grace)
    redis.call('HSET', key, F.stop_requested, 1, F.stop_reason, 'restart', F.stop_deadline, deadline)
    redis.call('ZADD', STOPPING, deadline, id)
  end
  emit(id, org, 'job.stopping', status, 'restart requested: stopping the current run first')
else
  return redis.error_reply('CONFLICT ' .. status)
end
return redis.call('HGET', key, F.status)
