-- serving is a serve job's agent saying, under its lease, which adapters its model server holds
-- (arg_loaded, space-separated) and which it could not load (ARGV[REST..]: id, reason pairs),
-- and hearing which it is to hold. A wanted adapter loaded is DEPLOYED, one that failed
-- DEPLOY_FAILED (no longer wanted); an adapter it was to drop and no longer holds is
-- NOT_DEPLOYED.
-- Returns the wanted adapters, each "<id> <job> <step> <kind> <base>"; errors LEASE_LOST.
local j = redis.call('HMGET', jobkey(arg_id), F.lease_token, F.status, F.agent_id, F.org)
if lease_lost(j[1], j[2], arg_token) then
  return LEASE_LOST
end
-- Each change is an event of the serve job (deployment.*: webhooks deliver them).
local function said(typ, a, what)
  local h = redis.call('HMGET', adapterkey(a), A.base, A.job, A.step)
  emit(arg_id, j[4], typ, j[2], 'adapter ' .. a .. ' (' .. (h[1] or '') .. ':' .. a .. ', step ' .. (h[3] or '?') ..
    ' of job ' .. (h[2] or '?') .. ') ' .. what)
end
local loaded = {}
for a in string.gmatch(arg_loaded, '%S+') do
  loaded[a] = true
end
for i = REST, #ARGV, 2 do
  local a = ARGV[i]
  if redis.call('SREM', servingkey(arg_id), a) == 1 then
    redis.call('HSET', adapterkey(a), A.deployment, 'DEPLOY_FAILED', A.error, ARGV[i + 1], A.server, '', A.updated_at, T)
    redis.call('ZREM', ADAPTERS_LIVE, a)
    said('deployment.failed', a, 'failed to deploy: ' .. ARGV[i + 1])
  end
end
for _, a in ipairs(redis.call('SMEMBERS', unloadingkey(arg_id))) do
  if not loaded[a] then
    redis.call('SREM', unloadingkey(arg_id), a)
    if redis.call('HGET', adapterkey(a), A.deployment) == 'UNLOADING' then
      redis.call('HSET', adapterkey(a), A.deployment, 'NOT_DEPLOYED', A.server, '', A.updated_at, T)
      redis.call('ZREM', ADAPTERS_LIVE, a)
      said('deployment.unloaded', a, 'unloaded')
    end
  end
end
local out = {}
for _, a in ipairs(redis.call('SMEMBERS', servingkey(arg_id))) do
  local h = redis.call('HMGET', adapterkey(a), A.deployment, A.job, A.step, A.kind, A.base)
  if not h[2] then
    redis.call('SREM', servingkey(arg_id), a) -- deleted meanwhile
  else
    if loaded[a] and h[1] ~= 'DEPLOYED' then
      redis.call('HSET', adapterkey(a), A.deployment, 'DEPLOYED', A.deployed_at, T, A.node, j[3] or '', A.updated_at, T)
      said('deployment.deployed', a, 'deployed on ' .. (j[3] or '?'))
    end
    out[#out + 1] = a .. ' ' .. h[2] .. ' ' .. h[3] .. ' ' .. h[4] .. ' ' .. h[5]
  end
end
return out
