-- put_own writes an ended job's hash, events and progress to the job's own slot, replacing
-- what was there (settle.go, on a cluster) — unless what is there ended later: a copy of a
-- newer end that was written first.
-- KEYS[1] the job's own hash (routes the call to the job's slot)
-- arg_finished_at the copy's end (ms); arg_progress JSON or ""; arg_nfields how many of the
-- further values are the hash's fields and values; ARGV[REST..] those, then the events.
-- Returns 1 if written, 0 if a newer copy is there.
local id = arg_id
local have = tonumber(redis.call('HGET', ownjob(id), 'finished_at'))
if have and have > tonumber(arg_finished_at) then
  return 0
end
redis.call('DEL', ownjob(id), ownev(id), ownprog(id))
local n = tonumber(arg_nfields)
push_chunked('HSET', ownjob(id), REST, REST + n - 1)
push_chunked('RPUSH', ownev(id), REST + n, #ARGV)
if arg_progress ~= '' then
  redis.call('SET', ownprog(id), arg_progress)
end
return 1
