-- release hands a job back from an agent that is going away (a preempted or drained node):
-- it goes back to its place in the queue at once, to resume from its newest checkpoint
-- elsewhere, without spending an attempt. A job that was told to stop stops; one told to
-- restart restarts.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] job id  ARGV[5] lease token  ARGV[6] reason  ARGV[7] progress JSON or ""
-- ARGV[8] when the job's GPUs were given back (ms) or ""  ARGV[9..] committed checkpoint
-- steps, ascending
-- Returns the job's status; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = ARGV[4]
local j = jobfields(id, RELEASE_FIELDS)
if j.lease_token ~= ARGV[5] or not is_live(j.status) then
  return redis.error_reply('LEASE_LOST lease token is not current')
end
local beyond = steps_beyond(id, 9)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
if ARGV[7] ~= '' then
  redis.call('SET', progkey(id), ARGV[7])
end
checkpoints(id, j.org, j.status, 9)
j.freed_at = ARGV[8]
return hand_back(id, j, 'released by ' .. (j.agent_id or 'its agent') .. ' (' .. ARGV[6] .. ')')
