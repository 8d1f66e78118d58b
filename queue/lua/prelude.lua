-- prelude.lua is prepended to every script.
--
-- Every script is called with ARGV[1] = key prefix ("{tag}:"), ARGV[2] = now (ms) and
-- ARGV[3] = the usage decay time constant tau (ms); its own arguments start at ARGV[4].
-- KEYS[1] only routes the call on Redis Cluster: every key shares the prefix's hash tag, so
-- the scripts build the keys they need (including keys of jobs they pick) from the prefix.
local PFX, NOW, TAU = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local OUTBOX = PFX .. 'outbox'
local FAIR = PFX .. 'fair'            -- orgs with ready jobs, by decayed usage / weight
local LEASES = PFX .. 'leases'        -- live jobs by lease expiry
local DELAYED = PFX .. 'delayed'      -- queued jobs waiting out a retry backoff, by ready time
local STOPPING = PFX .. 'stopping'    -- live jobs told to stop, by the end of their grace
local DEADLINES = PFX .. 'deadlines'  -- running jobs by the end of their time limit
local AGENTS = PFX .. 'agents'        -- agent -> what it last said it had free
local META = PFX .. 'meta'
local WAKE = PFX .. 'wake'

-- RANK_BASE spaces priorities apart in a class queue's score: rank = (100 - priority) *
-- RANK_BASE + enqueue time (ms), so higher priority first, then older first. 2^42 ms is 139
-- years, and 200 * 2^42 stays within a double's exact integers.
local RANK_BASE = 4398046511104

-- int renders a number for Redis exactly: Redis turns Lua numbers into strings with 14
-- significant digits, and a rank needs 15 to keep its milliseconds.
local function int(x)
  return string.format('%.0f', x)
end

local function jobkey(id) return PFX .. 'job:' .. id end
local function evkey(id) return PFX .. 'ev:' .. id end
local function orgkey(org) return PFX .. 'org:' .. org end
local function classq(org, class) return PFX .. 'q:' .. org .. ':' .. class end
local function classset(org) return PFX .. 'qc:' .. org end

-- Event types that also go to the webhook outbox; the rest stay in the job's own stream.
local OUTBOX_TYPES = {
  ['job.queued'] = true, ['job.started'] = true, ['job.checkpoint'] = true,
  ['job.completed'] = true, ['job.failed'] = true, ['job.stopped'] = true,
  ['job.retrying'] = true,
}
local OUTBOX_MAXLEN = 1000000

-- emit appends one event to the job's stream (and the outbox), numbered per job from 1.
local function emit(id, org, typ, status, detail)
  local seq = redis.call('HINCRBY', jobkey(id), 'event_seq', 1)
  redis.call('XADD', evkey(id), '*', 'seq', seq, 'type', typ, 'status', status, 'time', NOW, 'detail', detail)
  if OUTBOX_TYPES[typ] then
    redis.call('XADD', OUTBOX, 'MAXLEN', '~', OUTBOX_MAXLEN, '*',
      'job_id', id, 'org', org, 'seq', seq, 'type', typ, 'status', status, 'time', NOW, 'detail', detail)
  end
  return seq
end

local function is_live(status)
  return status == 'PENDING' or status == 'RUNNING'
end

-- Usage is kept in a fixed reference frame: an org's `usage` is its GPU-seconds, each scaled by
-- exp((t - tref) / tau) for the time t it was charged. Every org decays by the same factor, so
-- decay never reorders them and nothing needs rewriting as time passes; the reaper rebases tref
-- before the factor grows too large.
local function decay_factor()
  local tref = tonumber(redis.call('HGET', META, 'tref'))
  if not tref then
    redis.call('HSET', META, 'tref', NOW)
    tref = NOW
  end
  return math.exp((NOW - tref) / TAU)
end

local function weight(org)
  return tonumber(redis.call('HGET', orgkey(org), 'weight')) or 1
end

local function fair_score(org)
  local u = tonumber(redis.call('HGET', orgkey(org), 'usage')) or 0
  return u / weight(org)
end

-- charge adds gpu_ms GPU-milliseconds (negative for a refund) to an org's usage.
local function charge(org, gpu_ms)
  if gpu_ms == 0 then
    return
  end
  redis.call('HINCRBYFLOAT', orgkey(org), 'usage', gpu_ms / 1000 * decay_factor())
  if redis.call('ZSCORE', FAIR, org) then
    redis.call('ZADD', FAIR, fair_score(org), org)
  end
end

-- enqueue makes a queued job claimable: into its org's queue for its GPU class, by rank.
local function enqueue(id, org, class, rank)
  redis.call('ZADD', classq(org, class), int(rank), id)
  redis.call('SADD', classset(org), class)
  redis.call('ZADD', FAIR, fair_score(org), org)
end

-- unqueue takes a job out of its class queue, tidying the sets that index it.
local function unqueue(id, org, class)
  local q = classq(org, class)
  redis.call('ZREM', q, id)
  if redis.call('EXISTS', q) == 0 then
    redis.call('SREM', classset(org), class)
    if redis.call('SCARD', classset(org)) == 0 then
      redis.call('ZREM', FAIR, org)
    end
  end
end

-- requeue puts a job back in the queue (after delay_ms, if any) as a new attempt.
local function requeue(id, org, class, rank, delay_ms)
  redis.call('HSET', jobkey(id), 'status', 'QUEUED', 'updated_at', NOW)
  redis.call('HINCRBY', orgkey(org), 'queued', 1)
  if delay_ms > 0 then
    redis.call('ZADD', DELAYED, NOW + delay_ms, id)
    redis.call('HSET', jobkey(id), 'ready_at', NOW + delay_ms)
  else
    redis.call('HDEL', jobkey(id), 'ready_at')
    enqueue(id, org, class, rank)
  end
  redis.call('PUBLISH', WAKE, id)
end

-- release ends a job's hold on a lease and its GPUs: counters, the unused part of the
-- prepaid usage, and the lease, stop and time-limit indexes.
local function release(id)
  local j = redis.call('HMGET', jobkey(id), 'org', 'gpus', 'charged_until')
  local org, gpus, until_ms = j[1], tonumber(j[2]) or 0, tonumber(j[3]) or NOW
  redis.call('HINCRBY', orgkey(org), 'running', -1)
  redis.call('HINCRBY', orgkey(org), 'running_gpus', 0 - gpus) -- not -gpus: Lua writes -0
  if until_ms > NOW then
    charge(org, -gpus * (until_ms - NOW))
  end
  redis.call('HSET', jobkey(id), 'charged_until', NOW)
  redis.call('HDEL', jobkey(id), 'lease_token', 'lease_expires', 'stop_requested', 'stop_deadline', 'stop_reason')
  redis.call('ZREM', LEASES, id)
  redis.call('ZREM', STOPPING, id)
  redis.call('ZREM', DEADLINES, id)
end

-- finish_as ends a job in a terminal state.
local function finish_as(id, org, status, typ, detail)
  redis.call('HSET', jobkey(id), 'status', status, 'finished_at', NOW, 'updated_at', NOW)
  if status == 'FAILED' then
    redis.call('HSET', jobkey(id), 'error', detail)
  end
  emit(id, org, typ, status, detail)
end

-- restart_job queues a job that ended (or that an agent just gave up) again, as a new run
-- from its newest committed checkpoint, with a fresh attempt budget, at the back of its queue.
local function restart_job(id, org)
  local j = redis.call('HMGET', jobkey(id), 'class', 'checkpoint_step', 'priority')
  local rank = (100 - (tonumber(j[3]) or 0)) * RANK_BASE + NOW
  redis.call('HSET', jobkey(id), 'attempt', 1, 'rank', int(rank), 'resume_step', tonumber(j[2]) or 0)
  redis.call('HDEL', jobkey(id), 'error', 'finished_at', 'restart_requested')
  requeue(id, org, j[1], rank, 0)
  local detail = 'restarted'
  if tonumber(j[2]) then
    detail = 'restarted from the checkpoint of step ' .. j[2]
  end
  emit(id, org, 'job.queued', 'QUEUED', detail)
end

-- checkpoints records newly committed checkpoint steps (ARGV from index first on) as events.
local function checkpoints(id, org, status, first)
  local last = tonumber(redis.call('HGET', jobkey(id), 'checkpoint_step')) or 0
  for i = first, #ARGV do
    local step = tonumber(ARGV[i])
    if step > last then
      last = step
      redis.call('HSET', jobkey(id), 'checkpoint_step', step)
      emit(id, org, 'job.checkpoint', status, 'step ' .. step)
    end
  end
end

-- promote moves queued jobs whose retry backoff is over into their queues.
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', NOW, 'LIMIT', 0, limit)
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
