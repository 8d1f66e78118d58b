-- set_org changes an organization's share of the queue: its weight and its limits. A zero
-- clears the setting back to the service's default. The fair order moves with the weight.
-- KEYS[1] the org's hash (routes the call)
-- ARGV[4] org  ARGV[5] weight  ARGV[6] max running  ARGV[7] max queued
-- Returns OK.
local org = ARGV[4]
local fields = {{'weight', ARGV[5]}, {'max_running', ARGV[6]}, {'max_queued', ARGV[7]}}
for _, f in ipairs(fields) do
  if tonumber(f[2]) > 0 then
    redis.call('HSET', orgkey(org), f[1], f[2])
  else
    redis.call('HDEL', orgkey(org), f[1])
  end
end
redis.call('SADD', PFX .. 'orgs', org)
if redis.call('ZSCORE', FAIR, org) then
  redis.call('ZADD', FAIR, fair_score(org), org)
end
redis.call('PUBLISH', WAKE, 'org')
return redis.status_reply('OK')
