-- archive removes a job that ended from Redis once the archiver has written its record to
-- object storage: its hash, config, secrets, progress and events, and its entries in its
-- org's index and in the index of ended jobs. It removes nothing unless the job is still as
-- the record has it (ended at the same time, with the same number of events), so a job
-- restarted or changed after it was read stays, and the archiver writes it again later.
-- KEYS[1] the job's hash (routes the call)
-- arg_finished_at the finished_at the record holds; arg_events the number of events it holds
-- Returns 1 if the job was removed, 0 if it stays.
local id = arg_id
local j = redis.call('HMGET', jobkey(id), 'status', 'finished_at', 'org')
if not j[1] then
  redis.call('ZREM', ENDED, id) -- gone
  return 0
end
if not is_ended(j[1]) then
  unmark_ended(id, j[3]) -- queued again: not an ended job any more
  return 0
end
if j[2] ~= arg_finished_at or redis.call('LLEN', evkey(id)) ~= tonumber(arg_events) then
  return 0
end
redis.call('DEL', jobkey(id), cfgkey(id), seckey(id), progkey(id), evkey(id))
redis.call('ZREM', orgjobs(j[3]), id)
redis.call('ZREM', orgindex(j[3]), id)
unmark_ended(id, j[3])
return 1
