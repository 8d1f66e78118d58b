-- set_org changes an organization's share of the queue: its weight and its limits. A zero
-- clears the setting back to the service's default. The fair orders move with the weight, and
-- an organization given room to run is filed back in them, with waiting claims woken for its
-- ready jobs.
-- KEYS[1] the org's hash (routes the call)
-- Returns OK.
local org = arg_org
local fields = {{'weight', arg_weight}, {'max_running', arg_org_max_running}, {'max_queued', arg_org_max_queued}}
local before = redis.call('HMGET', orgkey(org), 'running', 'max_running')
for _, f in ipairs(fields) do
  if tonumber(f[2]) > 0 then
    redis.call('HSET', orgkey(org), f[1], f[2])
  else
    redis.call('HDEL', orgkey(org), f[1])
  end
end
redis.call('SADD', ORGS, org)
local o = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'usage', 'weight', 'classes')
local room = has_room(o[1], o[2])
refile(org, o[5], room, score(o[3], o[4]))
if room and not has_room(before[1], before[2]) then
  local limit = tonumber(o[2]) or DEF_RUNNING
  local n = 1000
  if limit > 0 then
    n = limit - (tonumber(o[1]) or 0)
  end
  wake_org(org, o[5], math.min(n, 1000))
end
return redis.status_reply('OK')
