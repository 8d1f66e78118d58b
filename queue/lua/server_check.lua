-- server_check looks at one model server (a serve job in SERVERS, the reaper's deployments
-- duty): one that ended leaves the index, and its organization's servers if it is still there;
-- a live one that is to hold nothing and drop nothing is answered 'empty' (the caller stops it).
-- arg_member is its entry in SERVERS: "<job>|<org>|<base or full:adapter>".
-- Returns 'ended' | 'empty' | ''.
local id, org, key = string.match(arg_member, '^([^|]*)|([^|]*)|(.*)$')
local st = redis.call('HGET', jobkey(id), F.status)
if not st or st == 'COMPLETED' or st == 'FAILED' or st == 'STOPPED' then
  redis.call('ZREM', SERVERS, arg_member)
  redis.call('DEL', servingkey(id), unloadingkey(id))
  if redis.call('HGET', orgservers(org), key) == id then
    redis.call('HDEL', orgservers(org), key)
  end
  return 'ended'
end
if redis.call('SCARD', servingkey(id)) == 0 and redis.call('SCARD', unloadingkey(id)) == 0 then
  return 'empty'
end
return ''
