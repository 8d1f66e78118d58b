package webhooks

import (
	"github.com/hostedtrain/hostedtrain/internal/redisfn"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
)

// The functions change a delivery's state in one step. Each takes the "{tag}:wh:" prefix and
// now (ms) first, then its own arguments by name (arg_<name>; internal/redisfn), builds its key
// names from the prefix with the builders generated from internal/rediskeys (all under one
// hash tag, so one cluster slot), and is routed by KEYS[1], the set of organizations with work
// due. prelude holds the helpers they share.

// prelude keeps the due deliveries per organization: due:{org} holds an organization's
// deliveries by when they may go, and dueorgs each organization that has any, by when its
// earliest may go (or, while all its slots are busy, when the first lease runs out). The take
// goes round the organizations in dueorgs, so one organization's backlog never stands in
// front of another's. busy:{org} holds the organization's deliveries being sent, by when
// their lease runs out.
var prelude = rediskeys.Webhooks.Lua("P") + `
local KEYS, ARGV, NOW

-- begin opens every call: the key prefix (ARGV[1]) and now (ARGV[2], ms) come first.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  NOW = tonumber(ARGV[2])
  setKeys(ARGV[1])
end

-- refresh scores org in dueorgs by its earliest due delivery, or removes it.
local function refresh(org)
  local f = redis.call('ZRANGE', dueset(org), 0, 0, 'WITHSCORES')
  if #f == 0 then
    redis.call('ZREM', DUEORGS, org)
  else
    redis.call('ZADD', DUEORGS, f[2], org)
  end
end

local function due_at(org, did, at)
  redis.call('ZADD', dueset(org), at, did)
  redis.call('ZREM', busyset(org), did)
  refresh(org)
end

local function not_due(org, did)
  redis.call('ZREM', dueset(org), did)
  redis.call('ZREM', busyset(org), did)
  refresh(org)
end

-- settle is called when a delivery of msg stops being pending: once none waits, the event is
-- kept keep seconds, as long as the deliveries that just finished.
local function settle(msg, keep)
  local ek = evkey(msg)
  if redis.call('EXISTS', ek) == 1 and redis.call('HINCRBY', ek, 'pending', -1) <= 0 then
    redis.call('EXPIRE', ek, keep)
  end
end

-- drop removes a delivery, its attempts, its place in the log and the due sets, and its
-- reference to its event (the event goes with its last delivery). keep is as for settle.
local function drop(did, keep)
  local dk = dlkey(did)
  local d = redis.call('HMGET', dk, 'ep', 'org', 'msg', 'status')
  if not d[1] then
    return
  end
  redis.call('DEL', dk, attkey(did))
  redis.call('ZREM', logkey(d[1]), did)
  not_due(d[2], did)
  local ek = evkey(d[3])
  if redis.call('EXISTS', ek) == 1 then
    if d[4] == 'pending' then
      settle(d[3], keep)
    end
    if redis.call('HINCRBY', ek, 'refs', -1) <= 0 then
      redis.call('DEL', ek)
    end
  end
end
`

// fanoutLua (function fanout) makes one delivery of a message for each endpoint of the organization that
// takes it. A delivery's id is a hash of the message and the endpoint, so fanning out the same
// outbox event twice (a dispatcher that died before acknowledging it) makes nothing twice. A delivery about a job waits behind
// the endpoint's earlier deliveries of that job. The event is stored once, in ev:{msg}, with
// how many deliveries refer to it (refs) and how many of those are pending; the deliveries
// refer to it by the message id. Each new delivery trims its endpoint's log to arg_keep
// entries, dropping the oldest finished deliveries.
// arg_org org  arg_type type
// arg_job_id job id or ""  arg_seq sequence  arg_msg message id  arg_status the job's status
// arg_detail detail  arg_time when the event happened (ms)  arg_data the data of an event that
// is not about a job (JSON) or ""  arg_only only this endpoint (a test; it need not
// subscribe, and is sent even if disabled) or ""  arg_except not this endpoint or ""
// arg_keep how many deliveries an endpoint's log keeps  arg_max_pending how many may wait to be sent
// (pending) at once: past it a delivery is not made, and the endpoint counts it (dropped)
// Returns the ids of the deliveries made.
var fanoutLua = `
local org, typ, jobid, msg = arg_org, arg_type, arg_job_id, arg_msg
local only, except, keepn, maxpend = arg_only, arg_except, tonumber(arg_keep), tonumber(arg_max_pending)
local function takes(csv)
  for e in string.gmatch(csv or '', '[^,]+') do
    if e == typ or e == '*' then
      return true
    end
  end
  return false
end
-- trim drops the oldest finished deliveries of ep's log while it holds more than keepn, and
-- forgets entries whose delivery has expired; it looks at a few, so each call is short.
local function trim(ep)
  local lk = logkey(ep)
  local n = redis.call('ZCARD', lk)
  if n <= keepn then
    return
  end
  for _, did in ipairs(redis.call('ZRANGE', lk, 0, 3)) do
    if n <= keepn then
      return
    end
    local st = redis.call('HGET', dlkey(did), 'status')
    if not st then
      redis.call('ZREM', lk, did)
      n = n - 1
    elseif st ~= 'pending' then
      drop(did, 0)
      n = n - 1
    end
  end
end
local eps
if only ~= '' then
  eps = {only}
else
  eps = redis.call('SMEMBERS', orgeps(org))
end
local made = {}
for _, ep in ipairs(eps) do
  local e = redis.call('HMGET', epkey(ep), 'org', 'enabled', 'events')
  if ep ~= except and e[1] == org and (only ~= '' or (e[2] == '1' and takes(e[3]))) then
    local did = 'dlv_' .. string.sub(redis.sha1hex(msg .. '|' .. ep), 1, 24)
    local dk = dlkey(did)
    -- A receiver that answers nothing for days makes deliveries pile up: an endpoint's backlog
    -- is bounded (its log then holds up to keepn finished and maxpend pending), and what does
    -- not fit is counted, for its owner to see.
    local full = false
    if only == '' and redis.call('EXISTS', dk) == 0 then
      trim(ep)
      full = redis.call('ZCARD', logkey(ep)) >= keepn + maxpend
      if full then
        redis.call('HINCRBY', epkey(ep), 'dropped', 1)
      end
    end
    if not full and redis.call('EXISTS', dk) == 0 then
      redis.call('HSET', dk, 'ep', ep, 'org', org, 'msg', msg, 'type', typ, 'job_id', jobid, 'seq', arg_seq,
        'status', 'pending', 'attempts', 0, 'created_at', ARGV[2], 'next_at', ARGV[2])
      if only ~= '' then
        redis.call('HSET', dk, 'force', '1')
      end
      redis.call('ZADD', logkey(ep), NOW, did)
      trim(ep)
      if jobid ~= '' then
        if redis.call('RPUSH', orderkey(ep, jobid), did) == 1 then
          due_at(org, did, NOW)
        end
      else
        due_at(org, did, NOW)
      end
      made[#made + 1] = did
    end
  end
end
if #made > 0 then
  local ek = evkey(msg)
  redis.call('HSET', ek, 'org', org, 'type', typ, 'job_id', jobid, 'seq', arg_seq, 'status', arg_status,
    'detail', arg_detail, 'time', arg_time, 'data', arg_data)
  redis.call('HINCRBY', ek, 'pending', #made)
  redis.call('HINCRBY', ek, 'refs', #made)
  redis.call('PERSIST', ek)
end
return made
`

// takeLua (function take) hands a dispatcher up to arg_want deliveries that are due, going round the
// organizations that have any and giving each at most arg_cap at once: it pushes each one's
// due time arg_lease_ms ms ahead and holds a slot of its organization's for as long (a dispatcher
// that dies mid-send leaves it to be taken again then). An organization whose slots are all
// held is passed over until one frees. It first moves deliveries left in the single due set
// of earlier versions into their organizations' sets.
// Returns the ids taken.
var takeLua = `
local legacy = redis.call('ZRANGE', LEGACY_DUE, 0, 99, 'WITHSCORES')
for i = 1, #legacy, 2 do
  local org = redis.call('HGET', dlkey(legacy[i]), 'org')
  if org then
    due_at(org, legacy[i], legacy[i + 1])
  end
  redis.call('ZREM', LEGACY_DUE, legacy[i])
end
local want, cap, lease = tonumber(arg_want), tonumber(arg_cap), NOW + tonumber(arg_lease_ms)
local open = redis.call('ZRANGEBYSCORE', DUEORGS, '-inf', NOW, 'LIMIT', 0, want)
for _, org in ipairs(open) do
  redis.call('ZREMRANGEBYSCORE', busyset(org), '-inf', NOW)
end
local taken = {}
while #taken < want and #open > 0 do
  local still = {}
  for _, org in ipairs(open) do
    if #taken >= want then
      break
    end
    local id = redis.call('ZRANGEBYSCORE', dueset(org), '-inf', NOW, 'LIMIT', 0, 1)[1]
    if id and redis.call('ZCARD', busyset(org)) < cap then
      redis.call('ZADD', dueset(org), lease, id)
      redis.call('ZADD', busyset(org), lease, id)
      taken[#taken + 1] = id
      still[#still + 1] = org
    elseif id then
      local first = redis.call('ZRANGE', busyset(org), 0, 0, 'WITHSCORES')
      redis.call('ZADD', DUEORGS, first[2], org)
    else
      refresh(org)
    end
  end
  open = still
end
for _, org in ipairs(open) do
  refresh(org)
end
return taken
`

// recordLua (function record) writes down an attempt and what follows from it.
// arg_id delivery id  arg_outcome outcome: delivered | retry | failed | gone (410) | skipped
// arg_code response code or ""  arg_latency_ms latency ms  arg_error error or ""  arg_next_at next attempt
// (ms) for retry  arg_line the attempt's log line  arg_disable_after_ms failing this long disables (ms)
// arg_disable_reason the reason given then  arg_keep_s how long finished deliveries are kept (s)
// A delivery that is finished (delivered, failed, skipped) lets the endpoint's next delivery
// of the same job go, and frees its organization's slot. An endpoint's first failure after a
// success starts its failing clock; a success stops it; 410, or failing for arg_disable_after_ms,
// disables it.
// Returns {the delivery's status, the reason the endpoint was disabled now or ""}.
var recordLua = `
local did, outcome = arg_id, arg_outcome
local dk = dlkey(did)
local d = redis.call('HMGET', dk, 'ep', 'job_id', 'org', 'msg', 'status')
if not d[1] then
  return {'missing', ''}
end
local ep, jobid, org, msg, was = d[1], d[2], d[3], d[4], d[5]
local ek = epkey(ep)
local disabled = ''
if outcome ~= 'skipped' then
  redis.call('HINCRBY', dk, 'attempts', 1)
  redis.call('HSET', dk, 'last_at', ARGV[2], 'last_code', arg_code, 'last_latency_ms', arg_latency_ms, 'last_error', arg_error)
  redis.call('LPUSH', attkey(did), arg_line)
  redis.call('LTRIM', attkey(did), 0, 9)
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
      elseif NOW - since >= tonumber(arg_disable_after_ms) then
        disabled = arg_disable_reason
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
  redis.call('HSET', dk, 'status', 'pending', 'next_at', arg_next_at)
  due_at(org, did, arg_next_at)
  return {'pending', ''}
end
local status = outcome
if outcome == 'retry' or outcome == 'gone' then
  status = 'failed'
end
redis.call('HSET', dk, 'status', status, 'next_at', '')
not_due(org, did)
redis.call('EXPIRE', dk, arg_keep_s)
redis.call('EXPIRE', attkey(did), arg_keep_s)
if was == 'pending' then
  settle(msg, arg_keep_s)
end
if jobid ~= '' then
  local ok = orderkey(ep, jobid)
  if redis.call('LINDEX', ok, 0) == did then
    redis.call('LPOP', ok)
    local nxt = redis.call('LINDEX', ok, 0)
    if nxt then
      due_at(org, nxt, NOW)
    end
  end
end
return {status, disabled}
`

// redeliverLua (function redeliver) sends a delivery again now, whatever became of it, and keeps it and its
// event while it is pending.
// arg_id delivery id  arg_ep endpoint id (it must be the delivery's)
// Returns 1, or 0 if the delivery is not the endpoint's, or -1 if its event is no longer kept.
var redeliverLua = `
local did = arg_id
local dk = dlkey(did)
local d = redis.call('HMGET', dk, 'ep', 'org', 'msg', 'status', 'body')
if d[1] ~= arg_ep then
  return 0
end
local ek = evkey(d[3])
if redis.call('EXISTS', ek) == 0 and not d[5] then
  return -1
end
if d[4] ~= 'pending' and not d[5] then
  redis.call('HINCRBY', ek, 'pending', 1)
  redis.call('PERSIST', ek)
end
redis.call('HSET', dk, 'status', 'pending', 'next_at', ARGV[2], 'force', '1')
redis.call('PERSIST', dk)
redis.call('PERSIST', attkey(did))
due_at(d[2], did, ARGV[2])
return 1
`

// purgeLua (function purge) removes up to arg_count of an endpoint's deliveries, with their attempts and
// their places in line, and their references to their events; the endpoint's job lines go
// with them. Delete calls it until nothing is left.
// arg_ep endpoint id  arg_count how many  arg_keep_s how long a settled event is kept (s)
// Returns how many of the endpoint's deliveries are left.
var purgeLua = `
local ep = arg_ep
local lk = logkey(ep)
for _, did in ipairs(redis.call('ZRANGE', lk, 0, tonumber(arg_count) - 1)) do
  local jobid = redis.call('HGET', dlkey(did), 'job_id')
  if jobid and jobid ~= '' then
    redis.call('DEL', orderkey(ep, jobid))
  end
  drop(did, arg_keep_s)
  redis.call('ZREM', lk, did)
end
return redis.call('ZCARD', lk)
`

// createLua (function create) registers an endpoint unless its organization already has arg_max.
// arg_org org  arg_max how many endpoints an organization may have  arg_ep endpoint id
// the further values the endpoint's fields, name then value
// Returns 1, or 0 when the organization is at its limit (nothing is written).
var createLua = `
local ok = orgeps(arg_org)
if redis.call('SCARD', ok) >= tonumber(arg_max) then
  return 0
end
local fields = {}
for i = REST, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', epkey(arg_ep), unpack(fields))
redis.call('SADD', ok, arg_ep)
return 1
`

// test_rateLua (function test_rate) counts a test delivery against its endpoint's window and its organization's
// (fixed windows of arg_window_ms ms, counted in Redis so every API instance shares them), or
// refuses it when either is full.
// arg_ep endpoint id  arg_org org  arg_per_ep tests per endpoint a window  arg_per_org tests per
// organization a window  arg_window_ms the window (ms)
// Returns {0, 0} when counted, or {1 (the endpoint's) or 2 (the organization's), ms until the
// full window ends}.
var test_rateLua = `
local ks = {eprate(arg_ep), orgrate(arg_org)}
local maxes = {tonumber(arg_per_ep), tonumber(arg_per_org)}
local window = tonumber(arg_window_ms)
for i, k in ipairs(ks) do
  if (tonumber(redis.call('GET', k)) or 0) >= maxes[i] then
    local ttl = redis.call('PTTL', k)
    if ttl < 0 then
      redis.call('PEXPIRE', k, window)
      ttl = window
    end
    return {i, ttl}
  end
end
for _, k in ipairs(ks) do
  if redis.call('INCR', k) == 1 then
    redis.call('PEXPIRE', k, window)
  end
end
return {0, 0}
`

// commonArgs come first in every call: the "{tag}:wh:" prefix the key names are built from,
// and now (ms).
var commonArgs = []string{"prefix", "now"}

// library is the webhooks' functions, their arguments by name (internal/redisfn).
var library = redisfn.MustBuild(redisfn.Spec{
	Prefix: "hostedtrain_wh",
	Header: prelude,
	Common: commonArgs,
	Args: map[string][]string{
		"fanout":    {"org", "type", "job_id", "seq", "msg", "status", "detail", "time", "data", "only", "except", "keep", "max_pending"},
		"take":      {"lease_ms", "want", "cap"},
		"record":    {"id", "outcome", "code", "latency_ms", "error", "next_at", "line", "disable_after_ms", "disable_reason", "keep_s"},
		"redeliver": {"id", "ep"},
		"purge":     {"ep", "count", "keep_s"},
		"create":    {"org", "max", "ep", redisfn.Rest},
		"test_rate": {"ep", "org", "per_ep", "per_org", "window_ms"},
	},
	Bodies: map[string]string{
		"fanout":    fanoutLua,
		"take":      takeLua,
		"record":    recordLua,
		"redeliver": redeliverLua,
		"purge":     purgeLua,
		"create":    createLua,
		"test_rate": test_rateLua,
	},
})
