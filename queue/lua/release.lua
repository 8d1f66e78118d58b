-- release hands a job back from an agent that is going away (a preempted or drained node):
-- it goes back to its place in the queue at once, to resume from its newest checkpoint
-- elsewhere, without spending an attempt. A job that was told to stop stops; one told to
-- restart restarts.
-- KEYS[1] the job's hash (routes the call)
-- arg_progress JSON or ""; arg_freed_at when the job's GPUs were given back (ms) or "";
-- ARGV[REST..] committed checkpoint steps, ascending.
-- Returns the job's status; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = arg_id
local j = jobfields(id, RELEASE_FIELDS)
if lease_lost(j.lease_token, j.status, arg_token) then
  return LEASE_LOST
end
local beyond = steps_beyond(id, REST)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
if arg_progress ~= '' then
  redis.call('SET', progkey(id), arg_progress)
end
j.checkpoint_step = checkpoints(id, j.org, j.status, REST) or j.checkpoint_step
j.freed_at = arg_freed_at
return hand_back(id, j, 'released by ' .. (j.agent_id or 'its agent') .. ' (' .. arg_reason .. ')')
