-- deploy puts an adapter of arg_org on a model server: the organization's live server for its
-- base model (arg_key: the base, or full:<adapter> for a full fine-tune, which gets a server of
-- its own) while it holds fewer than arg_max adapters, else the serve job arg_server the
-- caller has just submitted ("" first: the answer NEED_SERVER asks for one). A server is a job
-- of the queue like any other (fair share, GPU fit, budgets, node health): its agent loads
-- what serving.lua tells it. Deploying an adapter that is deploying or deployed changes nothing.
-- Returns {'NOT_FOUND'} | {'NEED_SERVER'} | {'OK', deployment, server, spare}: spare is the
-- caller's serve job when another server took the adapter after all (the caller stops it).
local a = redis.call('HMGET', adapterkey(arg_id), A.org, A.deployment, A.server)
if a[1] ~= arg_org then
  return {'NOT_FOUND'}
end
if a[2] == 'DEPLOYING' or a[2] == 'DEPLOYED' then
  return {'OK', a[2], a[3], arg_server}
end
local function usable(s)
  if not s or s == '' then
    return false
  end
  local j = redis.call('HMGET', jobkey(s), F.status, F.stop_requested)
  return (j[1] == 'QUEUED' or is_live(j[1])) and j[2] ~= '1' and
    redis.call('SCARD', servingkey(s)) < tonumber(arg_max)
end
local server = redis.call('HGET', orgservers(arg_org), arg_key)
local spare = ''
if not usable(server) then
  if arg_server == '' then
    return {'NEED_SERVER'}
  end
  server = arg_server
  redis.call('HSET', orgservers(arg_org), arg_key, server)
  redis.call('ZADD', SERVERS, T, server .. '|' .. arg_org .. '|' .. arg_key)
elseif arg_server ~= '' and arg_server ~= server then
  spare = arg_server
end
if a[2] == 'UNLOADING' then
  redis.call('SREM', unloadingkey(a[3]), arg_id)
end
redis.call('SADD', servingkey(server), arg_id)
redis.call('HSET', adapterkey(arg_id), A.deployment, 'DEPLOYING', A.server, server, A.error, '', A.idle, '',
  A.updated_at, T, A.used_at, T)
redis.call('ZADD', ADAPTERS_LIVE, T, arg_id)
return {'OK', 'DEPLOYING', server, spare}
