-- adapter_check keeps one adapter's deployment true to its server (the reaper's deployments
-- duty): a server that ended leaves it NOT_DEPLOYED (DEPLOY_FAILED if the server failed while it
-- was wanted); a server queued again (its node was lost) makes a DEPLOYED one DEPLOYING until
-- the next agent loads it; one DEPLOYED and unused for arg_idle_ms (0: never) is unloaded as
-- idle.
-- Returns '' | 'gone' | 'ended' | 'requeued' | 'idle'.
local a = redis.call('HMGET', adapterkey(arg_id), A.deployment, A.server, A.used_at, A.org)
if not a[1] or (a[1] ~= 'DEPLOYING' and a[1] ~= 'DEPLOYED' and a[1] ~= 'UNLOADING') then
  redis.call('ZREM', ADAPTERS_LIVE, arg_id)
  return 'gone'
end
local j = redis.call('HMGET', jobkey(a[2]), F.status, F.error)
local st = j[1]
if not st or st == 'COMPLETED' or st == 'FAILED' or st == 'STOPPED' then
  local f = {A.deployment, 'NOT_DEPLOYED', A.server, '', A.updated_at, T}
  if st == 'FAILED' and a[1] ~= 'UNLOADING' then
    f = {A.deployment, 'DEPLOY_FAILED', A.server, '', A.updated_at, T, A.error, 'its model server failed: ' .. (j[2] or '')}
  end
  redis.call('HSET', adapterkey(arg_id), unpack(f))
  redis.call('ZREM', ADAPTERS_LIVE, arg_id)
  redis.call('SREM', servingkey(a[2]), arg_id)
  redis.call('SREM', unloadingkey(a[2]), arg_id)
  return 'ended'
end
if (st == 'QUEUED' or st == 'PENDING') and a[1] == 'DEPLOYED' then
  redis.call('HSET', adapterkey(arg_id), A.deployment, 'DEPLOYING', A.node, '', A.updated_at, T)
  return 'requeued'
end
local idle = tonumber(arg_idle_ms) or 0
if a[1] == 'DEPLOYED' and idle > 0 and NOW - (tonumber(a[3]) or NOW) > idle then
  redis.call('SREM', servingkey(a[2]), arg_id)
  redis.call('SADD', unloadingkey(a[2]), arg_id)
  redis.call('HSET', adapterkey(arg_id), A.deployment, 'UNLOADING', A.idle, '1', A.updated_at, T)
  return 'idle' -- a reply, not a field
end
return ''
