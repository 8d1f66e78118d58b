-- stream keeps an organization's open event and log streams, so that one organization cannot
-- hold more than its share of the API's connections (and Redis's polling) whatever API process
-- each stream landed on. A stream is a member of the org's set, scored by when it must be
-- renewed; one not renewed in time (its API process died) no longer counts. how is
--   open:  take a place for arg_stream until arg_until, unless arg_max are open: 1 or 0;
--   renew: keep its place until arg_until: 1, or 0 if it had lost it;
--   close: give it back: 1.
-- KEYS[1] the org's stream set (routes the call)
local key = orgstreams(arg_org)
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. T)
if arg_how == 'close' then
  redis.call('ZREM', key, arg_stream)
  return 1
end
if arg_how == 'renew' then
  if not redis.call('ZSCORE', key, arg_stream) then
    return 0
  end
  redis.call('ZADD', key, arg_until, arg_stream)
  return 1
end
if redis.call('ZCARD', key) >= tonumber(arg_max) then
  return 0
end
redis.call('ZADD', key, arg_until, arg_stream)
redis.call('PEXPIREAT', key, arg_until)
return 1
