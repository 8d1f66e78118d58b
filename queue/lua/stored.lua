-- stored records what a job keeps in object storage (storage.go) in its organization's
-- stored-bytes hash, and the difference in the organization's total (`stored`). how is
--   set:  the job's measured bytes; written only while the job is live or ended in Redis (in
--         LEASES or ENDED), so a measurement that finishes after the job was deleted writes
--         nothing back;
--   renew: the job's bytes measured again after some were deleted (its checkpoints past the
--         TTL); only if it has an entry, which an archived job keeps and a deleted one has not;
--   drop: the job was deleted with its data.
-- KEYS[1] the org's stored-bytes hash (routes the call)
-- Returns the job's bytes now.
local h = orgstored(arg_org)
local old = tonumber(redis.call('HGET', h, arg_id) or '0')
local new = 0
if arg_how == 'set' then
  if not redis.call('ZSCORE', ENDED, arg_id) and not redis.call('ZSCORE', LEASES, arg_id) then
    return old
  end
  new = tonumber(arg_bytes)
elseif arg_how == 'renew' then
  if old == 0 then
    return 0
  end
  new = tonumber(arg_bytes)
end
if new > 0 then
  redis.call('HSET', h, arg_id, int(new))
else
  redis.call('HDEL', h, arg_id)
end
if new ~= old then
  redis.call('HINCRBY', orgkey(arg_org), 'stored', int(new - old))
end
return new
