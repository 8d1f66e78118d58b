-- stored records what a job keeps in object storage (storage.go) in its organization's
-- stored-bytes hash, and the difference in the organization's total (`stored`). how is
--   set:   the job's measured bytes; written only while the job is in Redis (live, or in
--          ENDED), so a measurement that finishes after the job was deleted writes nothing;
--   renew: the job's bytes measured again after some were deleted (its checkpoints past the
--          TTL); only if it has an entry, which an archived job keeps and a deleted one has not;
--   drop:  the job was deleted with its data: its entry and its measurements due go;
--   retry: nothing measured (its objects could not be listed): measured again in a minute.
-- member and taken are the entry of STORED_DUE the measurement was for and its score then
-- ("" for none): unless something filed it again meanwhile (the job ended, or was claimed
-- again), it is filed for a live job's next measurement, every_ms on, or taken out.
-- KEYS[1] the org's stored-bytes hash (routes the call)
-- Returns the job's bytes now.
local h, id = orgstored(arg_org), arg_id
local old = tonumber(redis.call('HGET', h, id) or '0')
local in_redis = redis.call('EXISTS', jobkey(id)) == 1 or redis.call('ZSCORE', ENDED, id)
local new = old
if arg_how == 'set' then
  if in_redis then
    new = tonumber(arg_bytes)
  end
elseif arg_how == 'renew' then
  if old > 0 then
    new = tonumber(arg_bytes)
  end
elseif arg_how == 'drop' then
  new = 0
  redis.call('ZREM', STORED_DUE, id, '~' .. id)
end
if new ~= old then
  if new > 0 then
    redis.call('HSET', h, id, int(new))
  else
    redis.call('HDEL', h, id)
  end
  redis.call('HINCRBY', orgkey(arg_org), 'stored', int(new - old))
end
if arg_member ~= '' and arg_how ~= 'drop' then
  local s = redis.call('ZSCORE', STORED_DUE, arg_member)
  if s and tonumber(s) == tonumber(arg_taken) then
    local live = in_redis and not redis.call('ZSCORE', ENDED, id)
    if arg_how == 'retry' then
      redis.call('ZADD', STORED_DUE, int(NOW + 60000), arg_member)
    elseif live and string.sub(arg_member, 1, 1) ~= '~' then
      redis.call('ZADD', STORED_DUE, int(NOW + tonumber(arg_every_ms)), arg_member)
    else
      redis.call('ZREM', STORED_DUE, arg_member)
    end
  end
end
return new
