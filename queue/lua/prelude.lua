-- prelude.lua opens the queue's Redis Functions library, after the key names generated from
-- internal/rediskeys; every script file after it becomes one function, which finds its own
-- arguments as locals arg_<name> (generated from queue/args.go). The helpers here are built
-- once, when the library is loaded, not per call.
--
-- KEYS[1] only routes the call on Redis Cluster: the queue's keys share the prefix's hash tag,
-- so the functions build the keys they need (including keys of jobs they pick) from the prefix.
-- A job's own keys (owncfg, ownjob, ...) carry the job's own tag: a function touches them only
-- when it runs on a single server (SPLIT false) or is routed by one of them (settle.go).
local KEYS, ARGV, NOW, T, TAU, DEF_RUNNING, DEF_QUEUED, SPLIT, DEF_BYTES, SHED
-- TO_SETTLE are the jobs this call ended (mark_ended): once the call's body has returned,
-- settle_all moves each one's record to its own slot, or files it for Go to (SPLIT).
local TO_SETTLE = {}

-- begin takes a call's common arguments (queue/args.go's commonArgs): the prefix, now (ms),
-- the usage decay time constant tau (ms), the default running and queued limits, whether the
-- store is a cluster ("1": a job's own keys are out of this call's reach), the bytes one
-- organization may hold (0: no bound), and whether an ended job's inputs leave Redis ("1": the
-- queue keeps a copy in object storage).
-- Functions run one at a time, so these upvalues are the call's own until it returns.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  SPLIT = args[6] == '1'
  TO_SETTLE = {}
  -- NOW is for arithmetic; T is the same time as the string it came as, for writing: Lua
  -- formats a number for every redis.call it is passed to, and that is costly.
  NOW, T, TAU = tonumber(args[2]), args[2], tonumber(args[3])
  DEF_RUNNING, DEF_QUEUED = tonumber(args[4]) or 0, tonumber(args[5]) or 0
  DEF_BYTES, SHED = tonumber(args[7]) or 0, args[8] == '1'
  if args[1] ~= PFX then
    setKeys(args[1])
  end
end

-- RANK_BASE spaces priorities apart in a class queue's score: rank = (100 - priority) *
-- RANK_BASE + enqueue time (ms), so higher priority first, then older first. 2^42 ms is 139
-- years, and 200 * 2^42 stays within a double's exact integers.
local RANK_BASE = 4398046511104

-- int renders a number for Redis exactly: Redis turns Lua numbers into strings with 14
-- significant digits, and a rank needs 15 to keep its milliseconds. A string (as read from a
-- hash) is passed through as it is.
local function int(x)
  if type(x) == 'string' then
    return x
  end
  return string.format('%d', x)
end

-- A job is a hash of small fields, kept small so Redis stores it compactly (as a listpack),
-- and three strings for its large values: the normalized config, the sealed secrets, and the
-- newest progress report (keys.go names them all). The hash's fields are named in one table,
-- queue/record.go: the Lua writes each as F.<name>, which the build replaces by its name in the
-- hash (a name not in the table fails the build); never as a string literal.
-- An org's hash holds its counters (queued, running, running_gpus, ended), its usage and
-- weight, its limits, `classes` — the GPU classes it has jobs ready in, comma-separated — and
-- `hooked` — "1" if it has a webhook endpoint. Keeping these in the hash the scripts read
-- anyway saves a call each.

-- Event types that also go to the webhook outbox; the rest stay in the job's own list.
local OUTBOX_TYPES = {
  ['job.queued'] = true, ['job.started'] = true, ['job.checkpoint'] = true,
  ['job.completed'] = true, ['job.failed'] = true, ['job.stopped'] = true,
  ['job.retrying'] = true, ['job.stalled'] = true, ['job.alert'] = true, ['job.budget'] = true,
  ['deployment.deployed'] = true, ['deployment.failed'] = true, ['deployment.unloaded'] = true,
}
local OUTBOX_MAXLEN = 1000000

-- What an organization holds in Redis (its `rbytes`), counted as it grows and shrinks: a job's
-- record (JOB_BYTES), its inputs — config and sealed secrets — while they are kept, and each
-- event (its length and EVENT_BYTES). The counts are estimates within a few percent of what
-- Redis spends (its allocator rounds up); they bound what one tenant can make Redis hold.
-- hold adds n bytes to org's count (n < 0 gives them back), never below 0.
local function hold(org, n)
  if n == 0 then
    return
  end
  if redis.call('HINCRBY', orgkey(org), 'rbytes', int(n)) < 0 then
    redis.call('HSET', orgkey(org), 'rbytes', 0)
  end
end

-- over_bytes returns org's bytes and its limit if n more would pass the limit, else nil.
local function over_bytes(org, n)
  if DEF_BYTES <= 0 then
    return nil
  end
  local cur = tonumber(redis.call('HGET', orgkey(org), 'rbytes')) or 0
  if cur + n > DEF_BYTES then
    return cur, DEF_BYTES
  end
  return nil
end

-- inputs_bytes is what an ended job's inputs free when they leave Redis: its sealed secrets,
-- and its config where it is bigger than KEEP_CFG (a smaller one stays: lists show it).
local function inputs_bytes(cfg, sec)
  local n = tonumber(sec) or 0
  if (tonumber(cfg) or 0) > KEEP_CFG then
    n = n + tonumber(cfg)
  end
  return n
end

-- emit appends one event to the job's list, whose positions number the job's events from 1,
-- as "time|type|status|detail" (the detail last: it may hold a "|"), and, for the types
-- webhooks deliver, to the outbox stream if the job's organization has a webhook endpoint.
-- The outbox only feeds webhook deliveries, so an organization without one pays nothing for it.
-- hooked is the org's `hooked` field if the caller read it (nil: look it up).
local function emit(id, org, typ, status, detail, hooked)
  local entry = T .. '|' .. typ .. '|' .. status .. '|' .. detail
  local seq = redis.call('RPUSH', evkey(id), entry)
  hold(org, #entry + EVENT_BYTES)
  if not OUTBOX_TYPES[typ] then
    return seq
  end
  if hooked == nil then
    hooked = redis.call('HGET', orgkey(org), 'hooked')
  end
  if hooked == '1' then
    redis.call('XADD', OUTBOX, 'MAXLEN', '~', OUTBOX_MAXLEN, '*',
      'job_id', id, 'org', org, 'seq', seq, 'type', typ, 'status', status, 'time', T, 'detail', detail) -- stream fields, not job fields
  end
  return seq
end

-- push_chunked runs cmd (HSET, RPUSH) on key with ARGV[from..to], a thousand values at a time:
-- Lua's unpack bounds how many values one call may take.
local function push_chunked(cmd, key, from, to)
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call(cmd, key, unpack(ARGV, i, j))
    i = j + 1
  end
end

local function is_live(status)
  return status == 'PENDING' or status == 'RUNNING'
end

-- lease_lost says whether a caller holding token has lost the lease of a job whose current
-- lease token and status are current and status: the one check of every write an agent makes
-- under its lease (heartbeat, finish, release), answered with LEASE_LOST.
local LEASE_LOST = {err = 'LEASE_LOST lease token is not current'}
local function lease_lost(current, status, token)
  return current ~= token or not is_live(status)
end

-- The parse of what agents say they have free, of GPU class names and of waiting claims, kept
-- across calls: all are few and repeat.
local FREE_CACHE, CLASS_CACHE, WAITER_CACHE, CACHE_SIZE = {}, {}, {}, 0

local function cache_room()
  if CACHE_SIZE > 10000 then
    FREE_CACHE, CLASS_CACHE, WAITER_CACHE, CACHE_SIZE = {}, {}, {}, 0
  end
  CACHE_SIZE = CACHE_SIZE + 1
end

-- parse_free reads "H100:8,A100:2" into {H100 = 8, A100 = 2} (model names upper case).
local function parse_free(s)
  local f = FREE_CACHE[s]
  if f then
    return f
  end
  f = {}
  for model, count in string.gmatch(s, '([^:,]+):(%d+)') do
    model = string.upper(model)
    f[model] = (f[model] or 0) + tonumber(count)
  end
  cache_room()
  FREE_CACHE[s] = f
  return f
end

-- parse_class reads "H100:8" into {model = 'H100', count = 8}.
local function parse_class(s)
  local c = CLASS_CACHE[s]
  if not c then
    local model, count = string.match(s, '^(.*):(%d+)$')
    c = {model = string.upper(model), count = tonumber(count)}
    cache_room()
    CLASS_CACHE[s] = c
  end
  return c
end

-- Usage is kept in a fixed reference frame: an org's `usage` is its GPU-milliseconds, each
-- scaled by exp((t - tref) / tau) for the time t it was charged, as a whole number. Every org
-- decays by the same factor, so decay never reorders them and nothing needs rewriting as time
-- passes; the reaper rebases tref before the factor passes e^10, which keeps the numbers far
-- below 2^53. Whole numbers are cheap: HINCRBY, and no float formatting.
local function decay_factor()
  local tref = tonumber(redis.call('HGET', META, 'tref'))
  if not tref then
    redis.call('HSET', META, 'tref', T)
    tref = NOW
  end
  return math.exp((NOW - tref) / TAU)
end

-- score is an org's place in the fair order: its usage per weight, as a whole number.
local function score(usage, weight)
  return int(math.floor((tonumber(usage) or 0) / (tonumber(weight) or 1)))
end

-- split_classes reads an org's `classes` field into a list (cached: the same few repeat).
local SPLIT_CACHE = {}
local function split_classes(s)
  if not s or s == '' then
    return {}
  end
  local list = SPLIT_CACHE[s]
  if not list then
    list = {}
    for c in string.gmatch(s, '[^,]+') do
      list[#list + 1] = c
    end
    SPLIT_CACHE[s] = list
  end
  return list
end

-- with_class and without_class edit a `classes` field value.
local function with_class(s, class)
  for _, c in ipairs(split_classes(s)) do
    if c == class then
      return s
    end
  end
  if not s or s == '' then
    return class
  end
  return s .. ',' .. class
end

local function without_class(s, class)
  local out = {}
  for _, c in ipairs(split_classes(s)) do
    if c ~= class then
      out[#out + 1] = c
    end
  end
  return table.concat(out, ',')
end

-- The fair order is kept per GPU class: fair:<class> holds the organizations that have a job
-- ready in that class and room to run one more (below their running limit), by usage per
-- weight. A claim looks only at the classes that fit its free GPUs, one key each, so an
-- organization at its limit costs a claim nothing: it is out of every fair order until a job of
-- its ends. has_room says whether an org may run one more job.
-- An organization held for its spent monthly budget (held "1") has no room, whatever its limit.
local function has_room(running, max_running, held)
  if held == '1' then
    return false
  end
  local limit = tonumber(max_running) or DEF_RUNNING
  return limit == 0 or (tonumber(running) or 0) < limit
end

-- refile puts an org in the fair order of every class it has ready jobs in, at score sc, if it
-- has room, or takes it out of them if not.
local function refile(org, classes, room, sc)
  for _, c in ipairs(split_classes(classes)) do
    if room then
      redis.call('ZADD', fairkey(c), sc, org)
    else
      redis.call('ZREM', fairkey(c), org)
    end
  end
end

-- rescore moves an org within the fair orders it is in, after its usage or weight changed.
local function rescore(org, classes, sc)
  for _, c in ipairs(split_classes(classes)) do
    redis.call('ZADD', fairkey(c), 'XX', sc, org)
  end
end

-- Months, for an organization's monthly budget: month_of(ms) is the UTC month ms falls in as
-- yyyymm, and the first ms of the month after (Howard Hinnant's civil-date algorithms).
local function days_from_civil(y, m, d)
  if m <= 2 then
    y = y - 1
  end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function month_of(ms)
  local z = math.floor(ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  local ny, nm = y, m + 1
  if nm == 13 then
    ny, nm = y + 1, 1
  end
  return y * 100 + m, days_from_civil(ny, nm, 1) * 86400000
end

-- An organization's monthly budget (month_budget_ms, GPU-ms; none when absent or 0) is spent
-- against month_ms, the GPU time charged to it in `month` (yyyymm, UTC): moved by the same
-- charges as its fair-share usage (a claim's prepaid quantum, each heartbeat's, a release's
-- refund), undecayed. month_seen is the highest of 50/80/100 % announced in the month; held
-- "1" while the budget is spent: out of the fair orders, nothing of it claimed, until the
-- budget is raised (set_org) or the month ends (BUDGET_HELD, the reaper).
-- month_fields are the org fields that add gpu_ms to month_ms as read (o_month, o_month_ms):
-- the GPU time spent in the month after it, and the fields to write.
local function month_fields(o_month, o_month_ms, gpu_ms)
  local month = month_of(NOW)
  if tonumber(o_month) ~= month then
    local ms = math.max(0, gpu_ms)
    return ms, {'month', month, 'month_ms', int(ms), 'month_seen', 0}
  end
  local ms = (tonumber(o_month_ms) or 0) + gpu_ms
  return ms, {'month_ms', int(ms)}
end

-- charge adds gpu_ms GPU-milliseconds (negative for a refund) to an org's usage, moving the
-- org in the fair orders it is in, and to its month's. It answers what the monthly budget needs:
-- {spent, budget, seen, held, classes}.
local function charge(org, gpu_ms)
  local o = redis.call('HMGET', orgkey(org), 'weight', 'classes', 'month', 'month_ms', 'month_budget_ms', 'month_seen', 'held')
  local spent, fields = month_fields(o[3], o[4], gpu_ms)
  local d = math.floor(gpu_ms * decay_factor() + 0.5)
  if d ~= 0 then
    local usage = redis.call('HINCRBY', orgkey(org), 'usage', int(d))
    rescore(org, o[2], score(usage, o[1]))
  end
  redis.call('HSET', orgkey(org), unpack(fields))
  local seen = tonumber(o[6]) or 0
  if tonumber(o[3]) ~= month_of(NOW) then
    seen = 0
  end
  return {spent = spent, budget = tonumber(o[5]) or 0, seen = seen, held = o[7] == '1', classes = o[2]}
end

-- over_budget says whether a job expected to take est_ms GPU-ms (its est_ms field, or nil) is
-- more than what is left of its org's monthly budget (o_month, o_month_ms, o_budget as read),
-- and what is left.
local function over_budget(est_ms, o_month, o_month_ms, o_budget)
  local budget, est = tonumber(o_budget) or 0, tonumber(est_ms) or 0
  if budget <= 0 or est <= 0 then
    return false, 0
  end
  local spent = 0
  if tonumber(o_month) == month_of(NOW) then
    spent = tonumber(o_month_ms) or 0
  end
  return est > budget - spent, math.max(0, budget - spent)
end

-- hold_org takes an organization whose monthly budget is spent out of the fair orders until
-- the budget is raised or its month ends.
local function hold_org(org, classes)
  redis.call('HSET', orgkey(org), 'held', '1')
  refile(org, classes, false)
  local _, month_end = month_of(NOW)
  redis.call('ZADD', BUDGET_HELD, month_end, org)
end

-- Waiting claims. A claim that finds nothing to take files itself as a waiter, a member
-- "<channel> <waiter> <free GPUs> <0|1: takes GPU-less jobs>", in waiters:<model> for each
-- model it has free (scored by how many) and in WAIT_ANY if it takes GPU-less jobs, and in
-- WAITING by when it stops waiting. A job that becomes claimable wakes only waiters it fits:
-- the ones with the fewest GPUs of its model free that are still enough, one per job, through
-- the channel of the API process the claim waits in. So a submit costs O(log n) whatever the
-- number of waiting claims, and a waiting claim is woken only for work it can take.
local function waiter_parts(w)
  local p = WAITER_CACHE[w]
  if not p then
    local chan, wid, free, any = string.match(w, '^(%S+) (%S+) (%S*) ([01])$')
    p = {chan = chan, wid = wid, free = free or '', any = any == '1'}
    cache_room()
    WAITER_CACHE[w] = p
  end
  return p
end

local function unwait(w)
  local p = waiter_parts(w)
  local held = redis.call('HGET', WAITER_HELD, w)
  for model in pairs(parse_free(p.free)) do
    redis.call('ZREM', waitkey(model), w)
    if held then
      for need in string.gmatch(held, '%S+') do
        redis.call('ZREM', waitheld(model, need), w)
      end
    end
  end
  if held then
    redis.call('HDEL', WAITER_HELD, w)
  end
  if p.any then
    redis.call('ZREM', WAIT_ANY, w)
  end
  redis.call('ZREM', WAITING, w)
end

-- A waiting claim is also filed by the models its node holds (held: cache needs, "m:<model>"
-- ones, at most WAIT_HELD_AT_MOST), so that a job of a model wakes a node that holds its
-- weights before one that would download them (cache-aware placement, issue 33).
local WAIT_HELD_AT_MOST = 32

-- held_models is the "m:<model>" cache needs of what a claim says its node holds, at most
-- WAIT_HELD_AT_MOST, in the order given.
local function held_models(held)
  local models = {}
  for need in string.gmatch(held or '', '%S+') do
    if #models < WAIT_HELD_AT_MOST and string.sub(need, 1, 2) == 'm:' then
      models[#models + 1] = need
    end
  end
  return models
end

local function wait_for_work(w, until_ms, held)
  local p = waiter_parts(w)
  local models = held_models(held)
  for model, n in pairs(parse_free(p.free)) do
    redis.call('ZADD', waitkey(model), n, w)
    for _, need in ipairs(models) do
      redis.call('ZADD', waitheld(model, need), n, w)
    end
  end
  if #models > 0 then
    redis.call('HSET', WAITER_HELD, w, table.concat(models, ' '))
  end
  if p.any then
    redis.call('ZADD', WAIT_ANY, 0, w)
  end
  redis.call('ZADD', WAITING, until_ms, w)
end

-- wake tells up to n waiting claims that could take a job of class to look again: first, where
-- the job's model is named (model_need, "m:<model>"), ones whose node holds its weights, then
-- any (unless warm_only), the fewest GPUs free that are enough first in each. A waiter whose
-- process is gone (nobody hears its channel) is dropped and the next one tried.
local function wake(class, n, model_need, warm_only)
  local c = parse_class(class)
  local z = WAIT_ANY
  local warm
  if c.count > 0 then
    z = waitkey(c.model)
    if model_need then
      warm = waitheld(c.model, model_need)
    end
  end
  local woken, tries = 0, 0
  while woken < n and tries < n + 8 do
    tries = tries + 1
    local w
    if warm then
      w = redis.call('ZRANGEBYSCORE', warm, c.count, '+inf', 'LIMIT', '0', '1')[1]
      if not w then
        warm = nil
      end
    end
    if not w and warm_only then
      return
    end
    w = w or redis.call('ZRANGEBYSCORE', z, c.count, '+inf', 'LIMIT', '0', '1')[1]
    if not w then
      return
    end
    unwait(w)
    local p = waiter_parts(w)
    if redis.call('PUBLISH', p.chan, p.wid) > 0 then
      woken = woken + 1
    end
  end
end

-- model_need is the "m:<model>" of a job's cache needs (F.needs), or nil.
local function model_need(needs)
  return string.match(needs or '', '(m:%S+)')
end

-- wake_org wakes, for each class an org has jobs ready in, as many waiters as it has such
-- jobs, up to n in all: after the org gained room to run (a job of its ended, its limit rose).
local function wake_org(org, classes, n)
  for _, c in ipairs(split_classes(classes)) do
    if n <= 0 then
      return
    end
    local k = math.min(n, redis.call('ZCARD', classq(org, c)))
    wake(c, k)
    n = n - k
  end
end

-- saw_agent records that an agent waits for work with free GPUs free ("H100:8,A100:2"): for
-- queue_reason, which asks whether any agent has a job's GPUs free. agents:free:<model> ranks
-- agents by how many of the model they have free; AGENTS_SEEN by when they last waited, so the
-- reaper drops the ones that went away.
local function saw_agent(agent, free)
  local old = redis.call('HGET', AGENTS, agent)
  if old ~= free then
    if old then
      for model in pairs(parse_free(old)) do
        redis.call('ZREM', agentfree(model), agent)
      end
    end
    for model, n in pairs(parse_free(free)) do
      redis.call('ZADD', agentfree(model), n, agent)
    end
    redis.call('HSET', AGENTS, agent, free)
  end
  redis.call('ZADD', AGENTS_SEEN, T, agent)
end

-- forget_agent drops an agent from the index saw_agent keeps, and the record of when it last
-- filed what it holds (its next claim files that again; the holders index itself keeps it
-- until held_ttl has passed: a busy node is still a holder).
local function forget_agent(agent)
  local old = redis.call('HGET', AGENTS, agent)
  if old then
    for model in pairs(parse_free(old)) do
      redis.call('ZREM', agentfree(model), agent)
    end
    redis.call('HDEL', AGENTS, agent)
  end
  redis.call('ZREM', AGENTS_SEEN, agent)
  redis.call('HDEL', AGENT_HELD, agent)
end

-- note_holder files an agent under the models its node holds (holders:<need>, scored by when
-- it said so), for a claim that asks whether any node holds a job's weights. It writes only
-- when the models changed or a quarter of ttl has passed since it last did, and drops what
-- the node no longer holds, and holders older than ttl, as it goes.
local function note_holder(agent, held, ttl)
  local models = held_models(held)
  local list = table.concat(models, ' ')
  local old = redis.call('HGET', AGENT_HELD, agent)
  local old_ms, old_list = string.match(old or '', '^(%d+) ?(.*)$')
  if (old_ms and old_list == list and NOW - tonumber(old_ms) < ttl / 4) or (not old and #models == 0) then
    return
  end
  local now_held = {}
  for _, need in ipairs(models) do
    now_held[need] = true
    redis.call('ZADD', holders(need), NOW, agent)
    redis.call('ZREMRANGEBYSCORE', holders(need), '-inf', '(' .. int(NOW - ttl))
  end
  for need in string.gmatch(old_list or '', '%S+') do
    if not now_held[need] then
      redis.call('ZREM', holders(need), agent)
    end
  end
  if #models > 0 then
    redis.call('HSET', AGENT_HELD, agent, int(NOW) .. ' ' .. list)
  else
    redis.call('HDEL', AGENT_HELD, agent)
  end
end

-- drop_holder takes an agent out of the holders of everything it said it holds: its node
-- left rotation.
local function drop_holder(agent)
  local old = redis.call('HGET', AGENT_HELD, agent)
  for need in string.gmatch(string.match(old or '', '^%d+ ?(.*)$') or '', '%S+') do
    redis.call('ZREM', holders(need), agent)
  end
  redis.call('HDEL', AGENT_HELD, agent)
end

-- index_job files a job in its org's index by kind, status and creation time (List's filters):
-- score = code * RANK_BASE + the creation time in its UUIDv7 id (ms), code = kind * 6 +
-- status, with the codes generated from queue/index.go. A status change is one ZADD.
local function id_ms(id)
  return tonumber(string.sub(id, 1, 8) .. string.sub(id, 10, 13), 16) or 0
end

local function index_job(id, org, kind, status)
  local code = (KIND_CODE[kind] or KIND_OTHER) * STATUSES + STATUS_CODE[status]
  redis.call('ZADD', orgindex(org), int(code * RANK_BASE + id_ms(id)), id)
end

-- enqueue makes a queued job claimable: into its org's queue for its GPU class, by rank, with
-- the class among the org's ready ones, the org in the class's fair order if it has room, and
-- a waiting claim that could take the job woken.
local function enqueue(id, org, class, rank)
  redis.call('ZADD', classq(org, class), int(rank), id)
  redis.call('HINCRBY', READY, class, 1)
  local o = redis.call('HMGET', orgkey(org), 'classes', 'usage', 'weight', 'running', 'max_running', 'held')
  local classes = with_class(o[1], class)
  if classes ~= o[1] then
    redis.call('HSET', orgkey(org), 'classes', classes)
    redis.call('SADD', CLASSES, class)
  end
  if has_room(o[4], o[5], o[6]) then
    redis.call('ZADD', fairkey(class), score(o[2], o[3]), org)
    wake(class, 1, model_need(redis.call('HGET', jobkey(id), F.needs)))
  end
end

-- unqueue takes a job out of its class queue (not for a claim, which does its own), tidying
-- the org's classes and its place in the class's fair order.
local function unqueue(id, org, class)
  local q = classq(org, class)
  redis.call('ZREM', q, id)
  redis.call('HINCRBY', READY, class, -1)
  if redis.call('EXISTS', q) == 0 then
    redis.call('HSET', orgkey(org), 'classes', without_class(redis.call('HGET', orgkey(org), 'classes'), class))
    redis.call('ZREM', fairkey(class), org)
  end
end

-- requeue puts a job back in the queue (after delay_ms, if any) as a new attempt. j has the
-- job's org, class, rank and kind.
local function requeue(id, j, delay_ms)
  redis.call('HINCRBY', orgkey(j.org), 'queued', 1)
  index_job(id, j.org, j.kind, 'QUEUED')
  if delay_ms > 0 then
    redis.call('ZADD', DELAYED, NOW + delay_ms, id)
    redis.call('HSET', jobkey(id), F.status, 'QUEUED', F.updated_at, T, F.ready_at, NOW + delay_ms)
  else
    redis.call('HSET', jobkey(id), F.status, 'QUEUED', F.updated_at, T)
    redis.call('HDEL', jobkey(id), F.ready_at)
    enqueue(id, j.org, j.class, tonumber(j.rank))
  end
end

-- account adds a hold's GPU time (used, GPU-ms) to its organization's usage by the user and the
-- token that submitted the job, with its cost at the price the job was submitted with.
local function account(id, org, used)
  if used <= 0 then
    return
  end
  local who = redis.call('HMGET', jobkey(id), F.by, F.token, F.price)
  local cost = math.floor(used * (tonumber(who[3]) or 0) / 3600000 + 0.5)
  for i, kind in ipairs({'u', 't'}) do
    if who[i] then
      redis.call('HINCRBY', orgusage(org), kind .. ':' .. who[i], int(used))
      if cost > 0 then
        redis.call('HINCRBY', orgusage(org), kind .. 'c:' .. who[i], int(cost))
      end
    end
  end
end

-- USAGE_EPOCH (2025-01-01, ms) is the origin of an org's hold_anchor: the sum, over its jobs
-- that hold GPUs now, of gpus * (held_since - USAGE_EPOCH). With it, the GPU time an org is
-- using right now is running_gpus * (now - USAGE_EPOCH) - hold_anchor, without reading a job.
-- Measured from a recent epoch the products stay far below 2^53, so doubles add them exactly.
local USAGE_EPOCH = 1735689600000

-- release ends a live job's hold on a lease and its GPUs: the org's counters, the unused part
-- of its prepaid usage and the GPU time the hold used (job and org `gpu_ms`, the raw
-- GPU-milliseconds behind GET /v1/usage), the lease and, if the job has them, its stop and
-- time-limit entries. The org is filed in the fair orders as its room now is (see below). j holds the job's fields as its caller
-- read them: org, gpus, charged_until, stop_requested, time_limit_ms, held_since, gpu_ms, and
-- freed_at where the agent said when it gave the GPUs back (the hold's GPU time ends there,
-- between the hold's start and now). extra are more job fields to set.
local function release(id, j, extra)
  local gpus = tonumber(j.gpus) or 0
  local paid = tonumber(j.charged_until) or NOW
  local o = redis.call('HMGET', orgkey(j.org), 'running', 'running_gpus', 'usage', 'weight', 'hooked', 'hold_anchor',
    'gpu_ms', 'classes', 'max_running', 'held', 'month', 'month_ms') -- org fields, not job fields
  j.hooked = o[5] or false -- for the caller's emit
  local usage = tonumber(o[3]) or 0
  local refund = paid > NOW
  if refund then
    usage = usage - math.floor(gpus * (paid - NOW) * decay_factor() + 0.5)
  end
  local running = (tonumber(o[1]) or 1) - 1
  local org_fields = {'running', int(running), 'running_gpus', int((tonumber(o[2]) or gpus) - gpus),
    'usage', int(usage)}
  if refund then
    local _, month = month_fields(o[11], o[12], -gpus * (paid - NOW))
    for _, f in ipairs(month) do
      org_fields[#org_fields + 1] = f
    end
  end
  local fields = {F.charged_until, T, F.lease_token, '', F.lease_expires, '', F.stop_requested, '',
    F.stop_deadline, '', F.stop_reason, '', F.held_since, ''}
  local held_since = tonumber(j.held_since)
  if held_since then
    local upto = NOW
    local freed = tonumber(j.freed_at)
    if freed and freed < NOW then
      upto = math.max(freed, held_since)
    end
    local used = gpus * (upto - held_since)
    account(id, j.org, used)
    fields[#fields + 1], fields[#fields + 2] = F.gpu_ms, int((tonumber(j.gpu_ms) or 0) + used)
    org_fields[#org_fields + 1] = 'gpu_ms' -- an org field, not the job's
    org_fields[#org_fields + 1] = int((tonumber(o[7]) or 0) + used)
    org_fields[#org_fields + 1] = 'hold_anchor'
    org_fields[#org_fields + 1] = int((tonumber(o[6]) or 0) - gpus * (held_since - USAGE_EPOCH))
  end
  redis.call('HSET', orgkey(j.org), unpack(org_fields))
  -- In the fair orders or out of them as its room is now, whatever it was before: a limit
  -- lowered or raised since (its own, or the service's default) is followed here. With room,
  -- a claim is woken for its ready jobs: one that ran may have been what kept them waiting.
  local room = has_room(running, o[9], o[10])
  refile(j.org, o[8], room, score(usage, o[4]))
  if room then
    wake_org(j.org, o[8], 1)
  end
  -- The lease and stop fields are emptied in the same write (an empty token matches none).
  for i = 1, #(extra or {}) do
    fields[#fields + 1] = extra[i]
  end
  redis.call('HSET', jobkey(id), unpack(fields))
  redis.call('ZREM', LEASES, id)
  if j.stop_requested == '1' then
    redis.call('ZREM', STOPPING, id)
  end
  if (tonumber(j.time_limit_ms) or 0) > 0 then
    redis.call('ZREM', DEADLINES, id)
  end
end

-- jobfields reads fields of a job (F.<name>: their names in the hash) into a table by their
-- Lua names (FIELD_ID).
local function jobfields(id, names)
  local vals = redis.call('HMGET', jobkey(id), unpack(names))
  local j = {}
  for i, n in ipairs(names) do
    j[FIELD_ID[n]] = vals[i]
  end
  return j
end

-- ended_fields are the job fields of a terminal state, for release's extra.
local function ended_fields(status, detail)
  if status == 'FAILED' then
    return {F.status, status, F.finished_at, T, F.updated_at, T, F.error, detail}
  end
  return {F.status, status, F.finished_at, T, F.updated_at, T}
end

local function is_ended(status)
  return status == 'COMPLETED' or status == 'FAILED' or status == 'STOPPED'
end

-- mark_ended files a job that just reached a terminal state in the index of ended jobs, from
-- which the archiver takes it once the retention has passed, and counts it in its org's
-- `ended`, which the archiver keeps below a cap.
local function mark_ended(id, org)
  if redis.call('ZADD', ENDED, T, id) == 1 then
    redis.call('HINCRBY', orgkey(org), 'ended', 1)
  end
  -- Its inputs leave Redis (a copy is in object storage: the queue wrote it at submit) when it
  -- moves to its own slot, and count no more from now: a job that ended holds its record and
  -- events, and a config of a few KiB, until it is archived.
  if SHED then
    local b = redis.call('HMGET', jobkey(id), F.cfg_bytes, F.sec_bytes, F.shed)
    if b[1] and b[3] ~= '1' then
      hold(org, -inputs_bytes(b[1], b[2]))
      redis.call('HSET', jobkey(id), F.shed, '1')
    end
  end
  -- An organization with a checkpoint TTL: its checkpoints go when the TTL has passed.
  if redis.call('HEXISTS', orgkey(org), 'ckpt_ttl_ms') == 1 then
    redis.call('ZADD', orgexpiring(org), T, id)
  end
  -- A job that ran is measured twice more (storage.go): once its last uploads are in, and once
  -- more after what a cut-off agent may still write (STORED_AFTER_END, STORED_LATE: luaStored).
  if redis.call('ZSCORE', STORED_DUE, id) then
    redis.call('ZADD', STORED_DUE, int(NOW + STORED_AFTER_END), id)
    redis.call('ZADD', STORED_DUE, int(NOW + STORED_LATE), '~' .. id)
  end
  TO_SETTLE[id] = true
end

-- unmark_ended takes a job out of the index of ended jobs (restarted, or archived: an archived
-- job's checkpoints still expire with its organization's TTL).
local function unmark_ended(id, org, archived)
  if redis.call('ZREM', ENDED, id) == 1 then
    redis.call('HINCRBY', orgkey(org), 'ended', -1)
  end
  if not archived then
    redis.call('ZREM', orgexpiring(org), id) -- live again: its checkpoints stay
  end
  TO_SETTLE[id] = nil
end

-- shed_inputs takes an ended job's inputs out of Redis: its sealed secrets, and its config where
-- it is bigger than KEEP_CFG (left as "": readers then read the copy in object storage). Called
-- where the job's own keys are in reach: move_own, put_own.
local function shed_inputs(id, cfg_bytes)
  redis.call('DEL', ownsec(id))
  if (tonumber(cfg_bytes) or 0) > KEEP_CFG then
    redis.call('SET', owncfg(id), '')
  end
end

-- move_own moves a job that ended from the queue's slot to its own: its hash, events and
-- progress replace what its own slot held (a live record is always whole: a revived job's
-- events and progress were copied back to it). Only on a single server, where a call reaches
-- every key; on a cluster settle.go does the same in three steps.
-- A job in TO_SETTLE ended in this call and nothing made it live again (unmark_ended takes it
-- out); every job has events (job.queued at least). Its progress may be missing: then so is
-- its own (a revived job's record came back whole), and RENAME's error is ignored.
local function move_own(id)
  local b = redis.call('HMGET', jobkey(id), F.shed, F.cfg_bytes)
  redis.call('RENAME', jobkey(id), ownjob(id))
  redis.call('RENAME', evkey(id), ownev(id))
  redis.pcall('RENAME', progkey(id), ownprog(id))
  if b[1] == '1' then
    shed_inputs(id, b[2])
  end
end

-- settle_all settles the jobs this call ended, once its body has returned (the wrapper each
-- function gets in functions.go calls it): on a single server they move to their own slot at
-- once; on a cluster they are filed in SETTLE for the caller (or the reaper) to move.
local function settle_all()
  for id in pairs(TO_SETTLE) do
    if SPLIT then
      redis.call('ZADD', SETTLE, T, id)
    else
      move_own(id)
    end
  end
  TO_SETTLE = {}
end

-- finish_as ends a job of org and kind in a terminal state.
local function finish_as(id, org, kind, status, typ, detail)
  redis.call('HSET', jobkey(id), unpack(ended_fields(status, detail)))
  index_job(id, org, kind, status)
  mark_ended(id, org)
  emit(id, org, typ, status, detail)
end

-- over_queued_limit returns an org's queued count and queued limit (its own, else def; 0 or
-- nil: none) if the org has no room for one more queued job, else nil.
local function over_queued_limit(org, def)
  local o = redis.call('HMGET', orgkey(org), 'queued', 'max_queued')
  local queued, limit = tonumber(o[1]) or 0, tonumber(o[2]) or tonumber(def) or 0
  if limit > 0 and queued >= limit then
    return queued, limit
  end
  return nil
end

-- restart_job queues a job that ended (or that an agent just gave up) again, as a new run
-- from its newest committed checkpoint, with a fresh attempt budget, at the back of its queue.
-- A restart is a submit as far as the org's queued limit goes: def is the limit unless the org
-- has its own (nil: the one the restart request recorded in the job's `restart_limit`). A job
-- that finds no room ends STOPPED instead. It returns the job's status.
local function restart_job(id, org, def)
  local j = jobfields(id, {F.class, F.checkpoint_step, F.priority, F.restart_limit, F.kind})
  j.org = org
  local queued, limit = over_queued_limit(org, def or j.restart_limit)
  if queued then
    redis.call('HDEL', jobkey(id), F.restart_requested, F.restart_limit)
    finish_as(id, org, j.kind, 'STOPPED', 'job.stopped', 'stopped; not queued again: organization at its queued limit (' ..
      queued .. ' of ' .. limit .. ' jobs queued)')
    return 'STOPPED'
  end
  j.rank = (100 - (tonumber(j.priority) or 0)) * RANK_BASE + NOW
  redis.call('HSET', jobkey(id), F.attempt, 1, F.rank, int(j.rank), F.resume_step, tonumber(j.checkpoint_step) or 0)
  redis.call('HDEL', jobkey(id), F.error, F.failure, F.avoid, F.finished_at, F.restart_requested, F.restart_limit)
  unmark_ended(id, org)
  requeue(id, j, 0)
  local detail = 'restarted'
  if tonumber(j.checkpoint_step) then
    detail = 'restarted from the checkpoint of step ' .. j.checkpoint_step
  end
  emit(id, org, 'job.queued', 'QUEUED', detail)
  return 'QUEUED'
end

-- node_fault records a fault on agent's node, now: how 'check', its agent's own check of the
-- node failed (the GPU driver, the kernel's log, its probes — nothing a job can write); 'lost',
-- a lease of its lapsed (a suspicion: the agent checks itself after one). One organization's
-- jobs count once within `window` ms, whatever their number (one tenant cannot walk a node
-- into quarantine). `after` failed checks within the window quarantine the node — NODES: no
-- claims, its running jobs go on (after 0 or less: never); lost leases never do. `what` is the
-- job's id or the check's evidence, for the operator. Node health is the operator's: `hostedtrain
-- admin nodes`.
local function node_fault(agent, what, org, how, after, window)
  if not agent or agent == '' then
    return
  end
  local key = nodefaults(agent)
  redis.call('ZADD', key, T, how .. ':' .. (org or ''))
  redis.call('ZADD', NODES_FAULTED, T, agent)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. int(NOW - window))
  redis.call('PEXPIRE', key, int(window))
  if how ~= 'check' or after <= 0 or redis.call('HEXISTS', NODES, agent) == 1 then
    return
  end
  local checks = 0
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if string.sub(m, 1, 6) == 'check:' then
      checks = checks + 1
    end
  end
  if checks >= after then
    redis.call('HSET', NODES, agent, 'quarantined|' .. T .. '|its health check failed (' .. what .. ')')
  end
end

-- failure_json is a failure analysis (job.FailureAnalysis) the service writes itself.
local function failure_json(class, fault, confidence, summary, evidence, attempt, retried)
  return cjson.encode({class = class, fault = fault, confidence = confidence, summary = summary,
    evidence = {evidence}, attempt = tonumber(attempt) or 1, retried = retried})
end

-- RETRY_FIELDS are the job fields retry_attempt needs, beside release's.
local RETRY_FIELDS = {F.attempt, F.max_attempts, F.checkpoint_step, F.agent_id, F.class, F.rank}

-- retry_attempt queues a job whose attempt failed for the platform's fault (its lease already
-- released, j holding RETRY_FIELDS, org and kind) again as attempt + 1, after a backoff of
-- base ms doubling per attempt up to cap (rnd in [0, 1) gives ±20 % jitter), to resume from its
-- newest checkpoint. The agent that ran the failed attempt is avoided for avoid_ms after the
-- backoff (the claim skips the job for it), so the retry lands on another node if there is one.
-- It returns the job's status, or nil (nothing done) when the job has no attempt left.
local function retry_attempt(id, j, why, base, cap, rnd, avoid_ms)
  local attempt, max = tonumber(j.attempt) or 1, tonumber(j.max_attempts) or 1
  if attempt >= max then
    return nil
  end
  local delay = math.floor(math.min(base * 2 ^ (attempt - 1), cap) * (0.8 + 0.4 * rnd))
  local fields = {F.attempt, int(attempt + 1), F.resume_step, int(tonumber(j.checkpoint_step) or 0)}
  if j.agent_id and avoid_ms > 0 then
    fields[#fields + 1], fields[#fields + 2] = F.avoid, j.agent_id .. '|' .. int(NOW + delay + avoid_ms)
  end
  redis.call('HSET', jobkey(id), unpack(fields))
  redis.call('HDEL', jobkey(id), F.agent_id)
  requeue(id, j, delay)
  local detail = why .. '; attempt ' .. (attempt + 1) .. ' of ' .. max .. ' in ' .. math.floor(delay / 1000) .. 's'
  if j.agent_id and avoid_ms > 0 then
    detail = detail .. ' on another node'
  end
  if j.checkpoint_step then
    detail = detail .. ', from the checkpoint of step ' .. j.checkpoint_step
  end
  emit(id, j.org, 'job.retrying', 'QUEUED', detail)
  return 'QUEUED'
end

-- avoids says whether a job's `avoid` field ("agent|until ms", retry_attempt) keeps agent from
-- claiming it now.
local function avoids(avoid, agent)
  if not avoid then
    return false
  end
  local who, till = string.match(avoid, '^(.*)|(%d+)$')
  return who == agent and tonumber(till) > NOW
end

-- RELEASE_FIELDS are the job fields hand_back (and release) need.
local RELEASE_FIELDS = {F.lease_token, F.status, F.stop_requested, F.org, F.restart_requested,
  F.class, F.rank, F.agent_id, F.gpus, F.charged_until, F.time_limit_ms, F.held_since, F.gpu_ms, F.kind,
  F.checkpoint_step}

-- hand_back ends an agent's hold on a live job (j has RELEASE_FIELDS) without spending an
-- attempt: it goes back to its place in the queue at once, to resume from its newest
-- checkpoint; a job that was told to stop stops, one told to restart restarts. It returns the
-- job's status.
local function hand_back(id, j, detail)
  local org = j.org
  release(id, j)
  if j.stop_requested == '1' then
    if j.restart_requested == '1' then
      return restart_job(id, org)
    end
    finish_as(id, org, j.kind, 'STOPPED', 'job.stopped', 'stopped on request')
    return 'STOPPED'
  end
  local step = j.checkpoint_step
  redis.call('HSET', jobkey(id), F.resume_step, tonumber(step) or 0)
  requeue(id, j, 0)
  if step then
    detail = detail .. '; resumes from the checkpoint of step ' .. step
  end
  emit(id, org, 'job.retrying', 'QUEUED', detail)
  return 'QUEUED'
end

-- steps_beyond checks the committed checkpoint steps an agent reports (ARGV from index first
-- on, ascending: the Go side checks the order and keeps at most a few) against the job's
-- max_steps. It returns the job's max_steps if the newest step is beyond it, else nil. A job
-- without max_steps in its hash (submitted before it was kept there, or a kind without steps)
-- is not checked here; the API's schema bounds every step.
local function steps_beyond(id, first)
  if first > #ARGV then
    return nil
  end
  local max = tonumber(redis.call('HGET', jobkey(id), F.max_steps))
  if max and tonumber(ARGV[#ARGV]) > max then
    return max
  end
  return nil
end

-- CHECKPOINT_EVENTS is how many job.checkpoint events one report emits (queue.MaxCheckpointEvents);
-- STEP_BACKLOG is how many reported steps may wait for theirs (queue.MaxStepBacklog): the
-- oldest beyond it get none.
local CHECKPOINT_EVENTS, STEP_BACKLOG = 16, 256

-- checkpoints records newly committed checkpoint steps (ARGV from index first on, ascending).
-- The newest becomes the job's checkpoint_step at once: what a restart resumes from. Each new
-- step gets a job.checkpoint event, oldest first, but one report emits at most
-- CHECKPOINT_EVENTS (all, with drain: the job's end); the rest wait in the job's step_backlog
-- for the next reports. So an agent back from an outage has every step it committed meanwhile
-- announced, and one report — honest or not — never floods the events, the outbox or the
-- webhook receivers. backlog is the job's step_backlog as the caller read it (false: none;
-- nil: not read). It returns the job's newest committed step (nil: none, or not looked at).
local function checkpoints(id, org, status, first, backlog, drain)
  if first > #ARGV and backlog == false then
    return nil
  end
  local h = redis.call('HMGET', jobkey(id), F.checkpoint_step, F.step_backlog)
  local last = tonumber(h[1]) or 0
  local waiting = {}
  for s in string.gmatch(h[2] or '', '%d+') do
    waiting[#waiting + 1] = s
  end
  local newest = last
  for i = first, #ARGV do
    local step = tonumber(ARGV[i])
    if step > newest then
      newest = step
      waiting[#waiting + 1] = ARGV[i]
    end
  end
  if newest > last then
    redis.call('HSET', jobkey(id), F.checkpoint_step, int(newest))
  end
  local result = h[1]
  if newest > last then
    result = int(newest)
  end
  if #waiting == 0 then
    return result
  end
  local from = math.max(1, #waiting - STEP_BACKLOG + 1)
  local to = #waiting
  if not drain then
    to = math.min(to, from + CHECKPOINT_EVENTS - 1)
  end
  for i = from, to do
    emit(id, org, 'job.checkpoint', status, 'step ' .. waiting[i])
  end
  if to < #waiting then
    redis.call('HSET', jobkey(id), F.step_backlog, table.concat(waiting, ',', to + 1, #waiting))
  elseif h[2] then
    redis.call('HDEL', jobkey(id), F.step_backlog)
  end
  return result
end


-- promote moves queued jobs whose retry backoff is over into their queues.
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', T, 'LIMIT', '0', limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', DELAYED, id)
    local j = redis.call('HMGET', jobkey(id), F.status, F.org, F.class, F.rank)
    if j[1] == 'QUEUED' then
      redis.call('HDEL', jobkey(id), F.ready_at)
      enqueue(id, j[2], j[3], tonumber(j[4]))
    end
  end
  return #due
end
