-- prelude.lua opens the queue's Redis Functions library; every script file after it becomes
-- one function. The helpers here are built once, when the library is loaded, not per call.
--
-- Every function is called with ARGV[1] = key prefix ("{tag}:"), ARGV[2] = now (ms) and
-- ARGV[3] = the usage decay time constant tau (ms); its own arguments start at ARGV[4].
-- KEYS[1] only routes the call on Redis Cluster: every key shares the prefix's hash tag, so
-- the functions build the keys they need (including keys of jobs they pick) from the prefix.
local KEYS, ARGV, PFX, NOW, T, TAU
local OUTBOX, FAIR, LEASES, DELAYED, STOPPING, DEADLINES, AGENTS, META, WAKE, ENDED

-- begin takes a call's arguments; functions run one at a time, so these upvalues are the
-- call's own until it returns.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  -- NOW is for arithmetic; T is the same time as the string it came as, for writing: Lua
  -- formats a number for every redis.call it is passed to, and that is costly.
  NOW, T, TAU = tonumber(args[2]), args[2], tonumber(args[3])
  if args[1] == PFX then
    return -- the key names of the last call's prefix still hold
  end
  PFX = args[1]
  OUTBOX = PFX .. 'outbox'       -- webhook outbox stream
  FAIR = PFX .. 'fair'           -- orgs with ready jobs, by decayed usage / weight
  -- live jobs by lease expiry, kept lazily: a heartbeat renews the lease in the job's hash
  -- only, so a score here is a lower bound; the reaper re-files an entry that comes due with
  -- its lease renewed. One index write per lease period, not per heartbeat.
  LEASES = PFX .. 'leases'
  DELAYED = PFX .. 'delayed'     -- queued jobs waiting out a retry backoff, by ready time
  STOPPING = PFX .. 'stopping'   -- live jobs told to stop, by the end of their grace
  DEADLINES = PFX .. 'deadlines' -- running jobs by the end of their time limit
  AGENTS = PFX .. 'agents'       -- agent -> what it last said it had free
  META = PFX .. 'meta'
  WAKE = PFX .. 'wake'
  -- jobs in a terminal state (COMPLETED, FAILED, STOPPED) by when they ended: what the
  -- archiver moves to object storage once the retention has passed
  ENDED = PFX .. 'ended'
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
-- newest progress report.
local function jobkey(id) return PFX .. 'job:' .. id end
local function cfgkey(id) return PFX .. 'cfg:' .. id end
local function seckey(id) return PFX .. 'sec:' .. id end
local function progkey(id) return PFX .. 'prog:' .. id end
local function evkey(id) return PFX .. 'ev:' .. id end
local function orgkey(org) return PFX .. 'org:' .. org end
local function classq(org, class) return PFX .. 'q:' .. org .. ':' .. class end
-- A claim an agent names (its claim id): "<job id> <lease token> <agent>" once made, "-" once
-- abandoned. It lives as long as a lease.
local function claimkey(cid) return PFX .. 'claim:' .. cid end
-- An org's hash holds its counters (queued, running, running_gpus), its usage and weight, its
-- limits, `classes` — the GPU classes it has jobs ready in, comma-separated — and `hooked` —
-- "1" if it has a webhook endpoint. Keeping these in the hash the scripts read anyway saves
-- a call each.

-- Event types that also go to the webhook outbox; the rest stay in the job's own list.
local OUTBOX_TYPES = {
  ['job.queued'] = true, ['job.started'] = true, ['job.checkpoint'] = true,
  ['job.completed'] = true, ['job.failed'] = true, ['job.stopped'] = true,
  ['job.retrying'] = true,
}
local OUTBOX_MAXLEN = 1000000

-- emit appends one event to the job's list, whose positions number the job's events from 1,
-- as "time|type|status|detail" (the detail last: it may hold a "|"), and, for the types
-- webhooks deliver, to the outbox stream if the job's organization has a webhook endpoint.
-- The outbox only feeds webhook deliveries, so an organization without one pays nothing for it.
-- hooked is the org's `hooked` field if the caller read it (nil: look it up).
local function emit(id, org, typ, status, detail, hooked)
  local seq = redis.call('RPUSH', evkey(id), T .. '|' .. typ .. '|' .. status .. '|' .. detail)
  if not OUTBOX_TYPES[typ] then
    return seq
  end
  if hooked == nil then
    hooked = redis.call('HGET', orgkey(org), 'hooked')
  end
  if hooked == '1' then
    redis.call('XADD', OUTBOX, 'MAXLEN', '~', OUTBOX_MAXLEN, '*',
      'job_id', id, 'org', org, 'seq', seq, 'type', typ, 'status', status, 'time', T, 'detail', detail)
  end
  return seq
end

local function is_live(status)
  return status == 'PENDING' or status == 'RUNNING'
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

local function fair_score(org)
  local o = redis.call('HMGET', orgkey(org), 'usage', 'weight')
  return score(o[1], o[2])
end

-- charge adds gpu_ms GPU-milliseconds (negative for a refund) to an org's usage, and moves the
-- org in the fair order if it has ready jobs.
local function charge(org, gpu_ms)
  local d = math.floor(gpu_ms * decay_factor() + 0.5)
  if d == 0 then
    return
  end
  local usage = redis.call('HINCRBY', orgkey(org), 'usage', int(d))
  redis.call('ZADD', FAIR, 'XX', score(usage, redis.call('HGET', orgkey(org), 'weight')), org)
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

-- enqueue makes a queued job claimable: into its org's queue for its GPU class, by rank, with
-- the class among the org's ready ones and the org in the fair order.
local function enqueue(id, org, class, rank)
  redis.call('ZADD', classq(org, class), int(rank), id)
  local o = redis.call('HMGET', orgkey(org), 'classes', 'usage', 'weight')
  local classes = with_class(o[1], class)
  if classes ~= o[1] then
    redis.call('HSET', orgkey(org), 'classes', classes)
  end
  redis.call('ZADD', FAIR, score(o[2], o[3]), org)
end

-- unqueue takes a job out of its class queue (not for a claim, which does its own), tidying
-- the org's classes and its place in the fair order.
local function unqueue(id, org, class)
  local q = classq(org, class)
  redis.call('ZREM', q, id)
  if redis.call('EXISTS', q) == 0 then
    local classes = without_class(redis.call('HGET', orgkey(org), 'classes'), class)
    redis.call('HSET', orgkey(org), 'classes', classes)
    if classes == '' then
      redis.call('ZREM', FAIR, org)
    end
  end
end

-- requeue puts a job back in the queue (after delay_ms, if any) as a new attempt.
local function requeue(id, org, class, rank, delay_ms)
  redis.call('HINCRBY', orgkey(org), 'queued', 1)
  if delay_ms > 0 then
    redis.call('ZADD', DELAYED, NOW + delay_ms, id)
    redis.call('HSET', jobkey(id), 'status', 'QUEUED', 'updated_at', T, 'ready_at', NOW + delay_ms)
  else
    redis.call('HSET', jobkey(id), 'status', 'QUEUED', 'updated_at', T)
    redis.call('HDEL', jobkey(id), 'ready_at')
    enqueue(id, org, class, rank)
  end
  redis.call('PUBLISH', WAKE, id)
end

-- USAGE_EPOCH (2025-01-01, ms) is the origin of an org's hold_anchor: the sum, over its jobs
-- that hold GPUs now, of gpus * (held_since - USAGE_EPOCH). With it, the GPU time an org is
-- using right now is running_gpus * (now - USAGE_EPOCH) - hold_anchor, without reading a job.
-- Measured from a recent epoch the products stay far below 2^53, so doubles add them exactly.
local USAGE_EPOCH = 1735689600000

-- release ends a live job's hold on a lease and its GPUs: the org's counters, the unused part
-- of its prepaid usage and the GPU time the hold used (job and org `gpu_ms`, the raw
-- GPU-milliseconds behind GET /v1/usage), the lease and, if the job has them, its stop and
-- time-limit entries. j holds the job's fields as its caller read them: org, gpus,
-- charged_until, stop_requested, time_limit_ms, and freed_at where the agent said when it gave
-- the GPUs back (the hold's GPU time ends there, between the hold's start and now). extra
-- are more job fields to set.
local function release(id, j, extra)
  local gpus = tonumber(j.gpus) or 0
  local paid = tonumber(j.charged_until) or NOW
  local o = redis.call('HMGET', orgkey(j.org), 'running', 'running_gpus', 'usage', 'weight', 'hooked', 'hold_anchor', 'gpu_ms')
  j.hooked = o[5] or false -- for the caller's emit
  local usage = tonumber(o[3]) or 0
  if paid > NOW then
    usage = usage - math.floor(gpus * (paid - NOW) * decay_factor() + 0.5)
  end
  local org_fields = {'running', int((tonumber(o[1]) or 1) - 1), 'running_gpus', int((tonumber(o[2]) or gpus) - gpus),
    'usage', int(usage)}
  local held_since = tonumber(redis.call('HGET', jobkey(id), 'held_since'))
  if held_since then
    local upto = NOW
    local freed = tonumber(j.freed_at)
    if freed and freed < NOW then
      upto = math.max(freed, held_since)
    end
    local used = gpus * (upto - held_since)
    redis.call('HINCRBY', jobkey(id), 'gpu_ms', int(used))
    org_fields[#org_fields + 1] = 'gpu_ms'
    org_fields[#org_fields + 1] = int((tonumber(o[7]) or 0) + used)
    org_fields[#org_fields + 1] = 'hold_anchor'
    org_fields[#org_fields + 1] = int((tonumber(o[6]) or 0) - gpus * (held_since - USAGE_EPOCH))
  end
  redis.call('HSET', orgkey(j.org), unpack(org_fields))
  if paid > NOW then
    redis.call('ZADD', FAIR, 'XX', score(usage, o[4]), j.org)
  end
  -- The lease and stop fields are emptied in the same write (an empty token matches none).
  local fields = {'charged_until', T, 'lease_token', '', 'lease_expires', '', 'stop_requested', '',
    'stop_deadline', '', 'stop_reason', '', 'held_since', ''}
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

-- jobfields reads fields of a job into a table by name.
local function jobfields(id, names)
  local vals = redis.call('HMGET', jobkey(id), unpack(names))
  local j = {}
  for i, n in ipairs(names) do
    j[n] = vals[i]
  end
  return j
end

-- ended_fields are the job fields of a terminal state, for release's extra.
local function ended_fields(status, detail)
  if status == 'FAILED' then
    return {'status', status, 'finished_at', T, 'updated_at', T, 'error', detail}
  end
  return {'status', status, 'finished_at', T, 'updated_at', T}
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
end

-- unmark_ended takes a job out of the index of ended jobs (restarted, or archived).
local function unmark_ended(id, org)
  if redis.call('ZREM', ENDED, id) == 1 then
    redis.call('HINCRBY', orgkey(org), 'ended', -1)
  end
end

-- finish_as ends a job in a terminal state.
local function finish_as(id, org, status, typ, detail)
  redis.call('HSET', jobkey(id), unpack(ended_fields(status, detail)))
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
  local j = redis.call('HMGET', jobkey(id), 'class', 'checkpoint_step', 'priority', 'restart_limit')
  local queued, limit = over_queued_limit(org, def or j[4])
  if queued then
    redis.call('HDEL', jobkey(id), 'restart_requested', 'restart_limit')
    finish_as(id, org, 'STOPPED', 'job.stopped', 'stopped; not queued again: organization at its queued limit (' ..
      queued .. ' of ' .. limit .. ' jobs queued)')
    return 'STOPPED'
  end
  local rank = (100 - (tonumber(j[3]) or 0)) * RANK_BASE + NOW
  redis.call('HSET', jobkey(id), 'attempt', 1, 'rank', int(rank), 'resume_step', tonumber(j[2]) or 0)
  redis.call('HDEL', jobkey(id), 'error', 'finished_at', 'restart_requested', 'restart_limit')
  unmark_ended(id, org)
  requeue(id, org, j[1], rank, 0)
  local detail = 'restarted'
  if tonumber(j[2]) then
    detail = 'restarted from the checkpoint of step ' .. j[2]
  end
  emit(id, org, 'job.queued', 'QUEUED', detail)
  return 'QUEUED'
end

-- RELEASE_FIELDS are the job fields hand_back needs.
local RELEASE_FIELDS = {'lease_token', 'status', 'stop_requested', 'org', 'restart_requested',
  'class', 'rank', 'agent_id', 'gpus', 'charged_until', 'time_limit_ms'}

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
    finish_as(id, org, 'STOPPED', 'job.stopped', 'stopped on request')
    return 'STOPPED'
  end
  local step = redis.call('HGET', jobkey(id), 'checkpoint_step')
  redis.call('HSET', jobkey(id), 'resume_step', tonumber(step) or 0)
  requeue(id, org, j.class, tonumber(j.rank), 0)
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
  local max = tonumber(redis.call('HGET', jobkey(id), 'max_steps'))
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
-- nil: not read).
local function checkpoints(id, org, status, first, backlog, drain)
  if first > #ARGV and backlog == false then
    return
  end
  local h = redis.call('HMGET', jobkey(id), 'checkpoint_step', 'step_backlog')
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
    redis.call('HSET', jobkey(id), 'checkpoint_step', int(newest))
  end
  if #waiting == 0 then
    return
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
    redis.call('HSET', jobkey(id), 'step_backlog', table.concat(waiting, ',', to + 1, #waiting))
  elseif h[2] then
    redis.call('HDEL', jobkey(id), 'step_backlog')
  end
end

-- The parse of what agents say they have free, and of GPU class names, kept across calls:
-- both are few and repeat.
local FREE_CACHE, CLASS_CACHE, CACHE_SIZE = {}, {}, 0

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
  if CACHE_SIZE > 10000 then
    FREE_CACHE, CLASS_CACHE, CACHE_SIZE = {}, {}, 0
  end
  FREE_CACHE[s], CACHE_SIZE = f, CACHE_SIZE + 1
  return f
end

-- parse_class reads "H100:8" into {model = 'H100', count = 8}.
local function parse_class(s)
  local c = CLASS_CACHE[s]
  if not c then
    local model, count = string.match(s, '^(.*):(%d+)$')
    c = {model = string.upper(model), count = tonumber(count)}
    CLASS_CACHE[s], CACHE_SIZE = c, CACHE_SIZE + 1
  end
  return c
end

-- promote moves queued jobs whose retry backoff is over into their queues.
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', T, 'LIMIT', '0', limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', DELAYED, id)
    local j = redis.call('HMGET', jobkey(id), 'status', 'org', 'class', 'rank')
    if j[1] == 'QUEUED' then
      redis.call('HDEL', jobkey(id), 'ready_at')
      enqueue(id, j[2], j[3], tonumber(j[4]))
    end
  end
  return #due
end
