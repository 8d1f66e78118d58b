-- unload takes an adapter of arg_org off its server: UNLOADING until the server's agent says
-- it is gone (serving.lua), or NOT_DEPLOYED at once where no agent holds it yet. arg_idle "1":
-- unloaded for being idle (the next request deploys it again).
-- Returns {'NOT_FOUND'} | {'OK', deployment}.
local a = redis.call('HMGET', adapterkey(arg_id), A.org, A.deployment, A.server)
if a[1] ~= arg_org then
  return {'NOT_FOUND'}
end
if a[2] ~= 'DEPLOYING' and a[2] ~= 'DEPLOYED' then
  return {'OK', a[2]}
end
redis.call('SREM', servingkey(a[3]), arg_id)
local to = 'NOT_DEPLOYED'
if redis.call('HGET', jobkey(a[3]), F.status) == 'RUNNING' then
  to = 'UNLOADING'
  redis.call('SADD', unloadingkey(a[3]), arg_id)
end
local f = {A.deployment, to, A.updated_at, T, A.idle, arg_idle}
if to == 'NOT_DEPLOYED' then
  f[#f + 1], f[#f + 2] = A.server, ''
  redis.call('ZREM', ADAPTERS_LIVE, arg_id)
end
redis.call('HSET', adapterkey(arg_id), unpack(f))
return {'OK', to}
