-- put_own writes an ended job's hash, events and progress to the job's own slot, replacing
-- what was there (settle.go, on a cluster) — unless what is there is newer, or the job is gone.
-- A job's events only grow from one end to the next (a restart takes them back and adds to
-- them), so a copy with more events than this one is of a later end, written first by a
-- faster settler. A job with no config left was archived: a slow settler must not bring it back.
-- KEYS[1] the job's own hash (routes the call to the job's slot)
-- arg_finished_at the copy's end (ms); arg_progress JSON or ""; arg_nfields how many of the
-- further values are the hash's fields and values; ARGV[REST..] those, then the events.
-- Returns 1 if written, 0 if not.
local id = arg_id
local n = tonumber(arg_nfields)
if redis.call('EXISTS', owncfg(id)) == 0 or redis.call('LLEN', ownev(id)) > #ARGV - (REST + n) + 1 then
  return 0
end
redis.call('DEL', ownjob(id), ownev(id), ownprog(id))
push_chunked('HSET', ownjob(id), REST, REST + n - 1)
push_chunked('RPUSH', ownev(id), REST + n, #ARGV)
if arg_progress ~= '' then
  redis.call('SET', ownprog(id), arg_progress)
end
-- Its inputs leave Redis (mark_ended): unless a restart of this very end put them back
-- already (the restart's mark names the end it restored them after: its time and events).
local b = redis.call('HMGET', ownjob(id), F.shed, F.cfg_bytes)
local this_end = arg_finished_at .. '|' .. (#ARGV - (REST + n) + 1)
if b[1] == '1' and redis.call('GET', ownrestored(id)) ~= this_end then
  shed_inputs(id, b[2])
end
return 1
