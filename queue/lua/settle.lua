-- settle ends the move of a job that ended to its own slot, on a cluster (settle.go): once the
-- caller has copied its hash, events and progress there (put_own), the queue's copy goes —
-- unless the job changed since the caller read it (restarted, or ended again).
-- KEYS[1] the job's hash (routes the call)
-- arg_finished_at and arg_events: the end and the number of events the copy holds.
-- Returns 1 if the queue's copy was removed, 0 if not.
local id = arg_id
local key = jobkey(id)
local j = redis.call('HMGET', key, F.status, F.finished_at)
if not is_ended(j[1]) then
  -- Settled already, or live again: nothing to move until it next ends.
  redis.call('ZREM', SETTLE, id)
  return 0
end
if j[2] ~= arg_finished_at or redis.call('LLEN', evkey(id)) ~= tonumber(arg_events) then
  return 0 -- changed since it was read: the next try copies it again
end
redis.call('DEL', key, evkey(id), progkey(id))
redis.call('ZREM', SETTLE, id)
return 1
