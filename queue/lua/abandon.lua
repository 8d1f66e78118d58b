-- abandon takes back a claim its agent gave up on before the answer reached it (the agent
-- closed the request: its free GPUs changed, or it is draining). A claim already made hands
-- its job back at once, without spending an attempt, as long as the agent never started it
-- (the job is still PENDING). A claim not made yet never will be: the claim id is marked, and
-- claim.lua takes nothing for a marked id. Functions run one at a time, so whichever of the
-- claim and its abandonment comes first, the job is never left held by nobody.
-- KEYS[1] the leases index (routes the call)
-- arg_mark_ttl how long the mark lasts (ms)
-- Returns the id of the job handed back, or "".
local key = claimkey(arg_claim_id)
local made = redis.call('GET', key)
redis.call('SET', key, '-', 'PX', arg_mark_ttl)
if not made or made == '-' then
  return ''
end
local id, token, agent = string.match(made, '^(%S+) (%S+) (.+)$')
if agent ~= arg_agent then
  redis.call('SET', key, made, 'PX', arg_mark_ttl) -- not this agent's claim: leave it be
  return ''
end
local j = jobfields(id, RELEASE_FIELDS)
if j.lease_token ~= token or j.status ~= 'PENDING' then
  return '' -- the agent did hear of it (it heartbeated), or the job moved on
end
hand_back(id, j, 'claimed by ' .. agent .. ', who stopped waiting before the answer reached it')
return id
