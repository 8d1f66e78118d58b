-- delete_begin marks a job that ended as being deleted, before anything of it is deleted: from
-- then on a restart (or a fork) of it is refused, so a delete never finds the job live again
-- after its checkpoints are gone. The mark stays until the delete is finished (Delete), however
-- long that takes: a delete that failed part way is finished by asking again.
-- KEYS[1] the job's hash (routes the call)
-- Returns "OK"; errors CONFLICT <status> for a job that has not ended. A job with no hash in the
-- queue's slot (moved to its own, or archived) has ended.
local id = arg_id
local status = redis.call('HGET', jobkey(id), F.status)
if status and not is_ended(status) then
  return redis.error_reply('CONFLICT ' .. status)
end
redis.call('SET', deletingkey(id), T)
return 'OK'
