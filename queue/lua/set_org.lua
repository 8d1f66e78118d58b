-- set_org changes an organization's share of the queue: its weight and its limits. A zero
-- clears the setting back to the service's default. The fair orders move with the weight, and
-- an organization given room to run is filed back in them, with waiting claims woken for its
-- ready jobs.
-- KEYS[1] the org's hash (routes the call)
-- Returns OK.
local org = arg_org
local fields = {{'weight', arg_weight}, {'max_running', arg_org_max_running}, {'max_queued', arg_org_max_queued},
  {'month_budget_ms', arg_month_budget_ms}, {'ckpt_ttl_ms', arg_ckpt_ttl_ms}}
local before = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'held', 'month_budget_ms')
for _, f in ipairs(fields) do
  if tonumber(f[2]) > 0 then
    redis.call('HSET', orgkey(org), f[1], f[2])
  else
    redis.call('HDEL', orgkey(org), f[1])
  end
end
redis.call('SADD', ORGS, org)
if tonumber(arg_ckpt_ttl_ms) > 0 then
  redis.call('SADD', TTL_ORGS, org)
else
  redis.call('SREM', TTL_ORGS, org)
  redis.call('DEL', orgexpiring(org))
end
-- A monthly budget raised above what the month spent lets a held organization run again; one
-- lowered to or below it holds the organization now.
local b = redis.call('HMGET', orgkey(org), 'month', 'month_ms', 'month_budget_ms', 'classes')
local budget = tonumber(b[3]) or 0
local spent = 0
if tonumber(b[1]) == month_of(NOW) then
  spent = tonumber(b[2]) or 0
end
if budget > 0 and spent >= budget then
  if before[3] ~= '1' then
    hold_org(org, b[4])
  end
elseif before[3] == '1' then
  redis.call('HDEL', orgkey(org), 'held')
  redis.call('ZREM', BUDGET_HELD, org)
end
local o = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'usage', 'weight', 'classes', 'held')
local room = has_room(o[1], o[2], o[6])
refile(org, o[5], room, score(o[3], o[4]))
-- Woken too when the budget was raised: jobs held for their estimate may fit in it now.
local raised = budget > (tonumber(before[4]) or 0) and (tonumber(before[4]) or 0) > 0
if room and (raised or not has_room(before[1], before[2], before[3])) then
  local limit = tonumber(o[2]) or DEF_RUNNING
  local n = 1000
  if limit > 0 then
    n = limit - (tonumber(o[1]) or 0)
  end
  wake_org(org, o[5], math.min(n, 1000))
end
return redis.status_reply('OK')
