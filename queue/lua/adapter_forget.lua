-- adapter_forget forgets an adapter of arg_org (its job was deleted): off its server, out of
-- every index, its record and latencies gone. The server stops once it holds nothing.
-- Returns 1, or 0 for no such adapter.
local a = redis.call('HMGET', adapterkey(arg_id), A.org, A.server, A.job, A.step)
if a[1] ~= arg_org then
  return 0
end
if a[2] and a[2] ~= '' then
  redis.call('SREM', servingkey(a[2]), arg_id)
  redis.call('SREM', unloadingkey(a[2]), arg_id)
end
redis.call('ZREM', ADAPTERS_LIVE, arg_id)
redis.call('ZREM', orgadapters(arg_org), arg_id)
if redis.call('GET', adapterof(a[3], a[4])) == arg_id then
  redis.call('DEL', adapterof(a[3], a[4]))
end
redis.call('DEL', adapterkey(arg_id), adapterlat(arg_id))
return 1
