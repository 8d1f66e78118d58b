package webhooks

import "github.com/redis/go-redis/v9"

// The scripts change a delivery's state in one step. Each takes the "{tag}:wh:" prefix as
// ARGV[1] and now (ms) as ARGV[2], builds its key names from the prefix (all under one hash
// tag, so one cluster slot), and is routed by KEYS[1], the due set.

// fanoutScript makes one delivery of a message for each endpoint of the organization that
// takes it, and acknowledges the outbox entry it came from, in one step. A delivery's id is a
// hash of the message and the endpoint, so reading the same entry twice (a dispatcher that
// died before its acknowledgement) makes nothing twice. A delivery about a job waits behind
// the endpoint's earlier deliveries of that job.
// ARGV[3] outbox key  ARGV[4] group  ARGV[5] outbox entry id or ""  ARGV[6] org  ARGV[7] type
// ARGV[8] job id or ""  ARGV[9] sequence  ARGV[10] message id  ARGV[11] body
// ARGV[12] how long the log keeps deliveries (ms)  ARGV[13] only this endpoint (a test; it
// need not subscribe, and is sent even if disabled) or ""  ARGV[14] not this endpoint or ""
// Returns the ids of the deliveries made.
var fanoutScript = redis.NewScript(`
local P, NOW = ARGV[1], tonumber(ARGV[2])
local org, typ, jobid, msg = ARGV[6], ARGV[7], ARGV[8], ARGV[10]
local only, except = ARGV[13], ARGV[14]
local function takes(csv)
  for e in string.gmatch(csv or '', '[^,]+') do
    if e == typ or e == '*' then
      return true
    end
  end
  return false
end
local eps
if only ~= '' then
  eps = {only}
else
  eps = redis.call('SMEMBERS', P .. 'org:' .. org)
end
local made = {}
for _, ep in ipairs(eps) do
  local e = redis.call('HMGET', P .. 'ep:' .. ep, 'org', 'enabled', 'events')
  if ep ~= except and e[1] == org and (only ~= '' or (e[2] == '1' and takes(e[3]))) then
    local did = 'dlv_' .. string.sub(redis.sha1hex(msg .. '|' .. ep), 1, 24)
    local dk = P .. 'dl:' .. did
    if redis.call('EXISTS', dk) == 0 then
      redis.call('HSET', dk, 'ep', ep, 'org', org, 'msg', msg, 'type', typ, 'job_id', jobid, 'seq', ARGV[9],
        'body', ARGV[11], 'status', 'pending', 'attempts', 0, 'created_at', ARGV[2], 'next_at', ARGV[2])
      if only ~= '' then
        redis.call('HSET', dk, 'force', '1')
      end
      redis.call('ZADD', P .. 'log:' .. ep, NOW, did)
      redis.call('ZREMRANGEBYSCORE', P .. 'log:' .. ep, '-inf', NOW - tonumber(ARGV[12]))
      if jobid ~= '' then
        if redis.call('RPUSH', P .. 'order:' .. ep .. ':' .. jobid, did) == 1 then
          redis.call('ZADD', P .. 'due', NOW, did)
        end
      else
        redis.call('ZADD', P .. 'due', NOW, did)
      end
      made[#made + 1] = did
    end
  end
end
if ARGV[5] ~= '' then
  redis.call('XACK', ARGV[3], ARGV[4], ARGV[5])
end
return made
`)

// takeScript hands a dispatcher up to ARGV[4] deliveries that are due, pushing each one's due
// time ARGV[3] ms ahead: a dispatcher that dies mid-send leaves it to be taken again then.
var takeScript = redis.NewScript(`
local P, NOW = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', P .. 'due', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZADD', P .. 'due', NOW + tonumber(ARGV[3]), id)
end
return ids
`)

// recordScript writes down an attempt and what follows from it.
// ARGV[3] delivery id  ARGV[4] outcome: delivered | retry | failed | gone (410) | skipped
// ARGV[5] response code or ""  ARGV[6] latency ms  ARGV[7] error or ""  ARGV[8] next attempt
// (ms) for retry  ARGV[9] the attempt's log line  ARGV[10] failing this long disables (ms)
// ARGV[11] the reason given then  ARGV[12] how long finished deliveries are kept (s)
// A delivery that is finished (delivered, failed, skipped) lets the endpoint's next delivery
// of the same job go. An endpoint's first failure after a success starts its failing clock; a
// success stops it; 410, or failing for ARGV[10], disables it.
// Returns {the delivery's status, the reason the endpoint was disabled now or ""}.
var recordScript = redis.NewScript(`
local P, NOW, did, outcome = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local dk = P .. 'dl:' .. did
local d = redis.call('HMGET', dk, 'ep', 'job_id')
if not d[1] then
  return {'missing', ''}
end
local ep, jobid = d[1], d[2]
local ek = P .. 'ep:' .. ep
local disabled = ''
if outcome ~= 'skipped' then
  redis.call('HINCRBY', dk, 'attempts', 1)
  redis.call('HSET', dk, 'last_at', ARGV[2], 'last_code', ARGV[5], 'last_latency_ms', ARGV[6], 'last_error', ARGV[7])
  redis.call('LPUSH', P .. 'att:' .. did, ARGV[9])
  redis.call('LTRIM', P .. 'att:' .. did, 0, 9)
  if redis.call('EXISTS', ek) == 1 then
    if outcome == 'delivered' then
      redis.call('HDEL', ek, 'failing_since')
    else
      local since = tonumber(redis.call('HGET', ek, 'failing_since'))
      if not since then
        redis.call('HSET', ek, 'failing_since', ARGV[2])
        since = NOW
      end
      if outcome == 'gone' then
        disabled = 'the endpoint answered 410 Gone'
      elseif NOW - since >= tonumber(ARGV[10]) then
        disabled = ARGV[11]
      end
      if disabled ~= '' then
        if redis.call('HGET', ek, 'enabled') == '1' then
          redis.call('HSET', ek, 'enabled', '0', 'disabled_reason', disabled, 'disabled_at', ARGV[2])
        else
          disabled = ''
        end
      end
    end
  end
end
if outcome == 'retry' and disabled == '' then
  redis.call('HSET', dk, 'status', 'pending', 'next_at', ARGV[8])
  redis.call('ZADD', P .. 'due', ARGV[8], did)
  return {'pending', ''}
end
local status = outcome
if outcome == 'retry' or outcome == 'gone' then
  status = 'failed'
end
redis.call('HSET', dk, 'status', status, 'next_at', '')
redis.call('ZREM', P .. 'due', did)
redis.call('EXPIRE', dk, ARGV[12])
redis.call('EXPIRE', P .. 'att:' .. did, ARGV[12])
if jobid ~= '' then
  local ok = P .. 'order:' .. ep .. ':' .. jobid
  if redis.call('LINDEX', ok, 0) == did then
    redis.call('LPOP', ok)
    local nxt = redis.call('LINDEX', ok, 0)
    if nxt then
      redis.call('ZADD', P .. 'due', NOW, nxt)
    end
  end
end
return {status, disabled}
`)

// redeliverScript sends a delivery again now, whatever became of it, and keeps it while it is
// pending.
// ARGV[3] delivery id  ARGV[4] endpoint id (it must be the delivery's)
var redeliverScript = redis.NewScript(`
local P = ARGV[1]
local dk = P .. 'dl:' .. ARGV[3]
if redis.call('HGET', dk, 'ep') ~= ARGV[4] then
  return 0
end
redis.call('HSET', dk, 'status', 'pending', 'next_at', ARGV[2], 'force', '1')
redis.call('PERSIST', dk)
redis.call('PERSIST', P .. 'att:' .. ARGV[3])
redis.call('ZADD', P .. 'due', ARGV[2], ARGV[3])
return 1
`)
