-- archive makes the queue forget a job that ended, once the archiver has written its record to
-- object storage (archive.go): its entries in its org's indices and in the index of ended jobs.
-- It forgets nothing unless the job is as the record has it: ended at the same time (its score
-- in ENDED) and not back in the queue's slot (restarted since it was read, or not yet moved to
-- its own slot). The job's own keys are then deleted by the caller; DROPPING holds the job until
-- that is done.
-- KEYS[1] the job's hash (routes the call)
-- arg_finished_at the end the record holds ("": the job has no hash anywhere); arg_org its org;
-- arg_bytes what the job holds that its org's count gives back (its record, events, inputs)
-- Returns 1 if the queue forgot the job, 0 if it stays.
local id = arg_id
local live = redis.call('HMGET', jobkey(id), F.status, F.org)
if live[1] then
  if not is_ended(live[1]) then
    unmark_ended(id, live[2]) -- queued again: not an ended job any more
  end
  return 0
end
if arg_finished_at == '' then
  redis.call('ZREM', ENDED, id) -- gone
  return 0
end
local at = redis.call('ZSCORE', ENDED, id)
if not at or tonumber(at) ~= tonumber(arg_finished_at) then
  return 0
end
redis.call('ZREM', orgjobs(arg_org), id)
redis.call('ZREM', orgindex(arg_org), id)
unmark_ended(id, arg_org, true)
redis.call('ZADD', DROPPING, T, id)
hold(arg_org, -tonumber(arg_bytes))
return 1
