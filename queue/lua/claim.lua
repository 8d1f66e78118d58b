-- claim hands an agent the next job that fits its free GPUs, in weighted fair order: the
-- organizations with ready jobs from the least decayed usage per weight up, skipping those at
-- their running limit; within one, the best-ranked job (priority, then age) among the heads
-- of its GPU-class queues that fit. A job that does not fit never blocks one that does.
-- KEYS[1] the leases index (routes the call)
-- ARGV[4] lease TTL (ms)  ARGV[5] agent id  ARGV[6] random part of the token
-- ARGV[7] free GPUs, "H100:8,A100:2" ("" for none)  ARGV[8] default running limit (0: none)
-- ARGV[9] usage prepaid at claim (ms of each GPU)  ARGV[10] the lease's expiry (ms)
-- ARGV[11] the end of the prepaid time (ms)  ARGV[12] "1": only jobs that need a GPU (the agent
-- runs as many GPU-less jobs as it will)  ARGV[13] the agent's claim id, or "": a claim made
-- is recorded under it, and a claim the agent already abandoned takes nothing (abandon.lua)
-- Returns {lease token, the job's CLAIMED fields in order, config, sealed secrets or false};
-- the token is "<fence>.<random>", and the fence grows with every claim of the job. When nothing fits: {"", the time (ms) the next
-- retry backoff ends, or 0}, so a waiting claim knows when to look again.
-- The job fields a claim answers with (what an agent needs of the job); queue.go reads them
-- in this order.
local CLAIMED = {'id', 'org', 'kind', 'name', 'status', 'attempt', 'max_attempts', 'resume_step',
  'created_at', 'updated_at', 'agent_id'}
local agent, quantum = ARGV[5], tonumber(ARGV[9])
local claim_id = ARGV[13]
if claim_id ~= '' and redis.call('EXISTS', claimkey(claim_id)) == 1 then
  return {'', 0}
end
promote('100')

local free = parse_free(ARGV[7])
local gpu_only = ARGV[12] == '1'
local function fits(class)
  local c = parse_class(class)
  if c.count == 0 then
    return not gpu_only
  end
  return (free[c.model] or 0) >= c.count
end

local default_limit = tonumber(ARGV[8])
-- The fair order, read a few organizations at a time: the first usually has a job that fits.
local CHUNK = 8
local function fair_order()
  local start, list, i = 0, {}, 0
  return function()
    i = i + 1
    if i > #list then
      list = redis.call('ZRANGE', FAIR, int(start), int(start + CHUNK - 1))
      start, i = start + CHUNK, 1
    end
    return list[i]
  end
end
for org in fair_order() do
  local o = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'queued', 'running_gpus', 'usage', 'weight',
    'classes', 'hooked', 'hold_anchor')
  local running = tonumber(o[1]) or 0
  local limit = tonumber(o[2]) or default_limit
  if limit == 0 or running < limit then
    local best, best_rank, best_class, best_last
    local fitting = {}
    for _, class in ipairs(split_classes(o[7])) do
      if fits(class) then
        fitting[#fitting + 1] = class
      end
    end
    if #fitting == 1 then
      -- One class fits: its head, and whether anything stands behind it; no ranks needed.
      local head = redis.call('ZRANGE', classq(org, fitting[1]), '0', '1')
      if head[1] then
        best, best_class, best_last = head[1], fitting[1], head[2] == nil
      end
    else
      for _, class in ipairs(fitting) do
        local head = redis.call('ZRANGE', classq(org, class), '0', '1', 'WITHSCORES')
        if head[1] and (not best or tonumber(head[2]) < best_rank) then
          best, best_rank, best_class, best_last = head[1], tonumber(head[2]), class, head[3] == nil
        end
      end
    end
    if best then
      local id, key = best, jobkey(best)
      redis.call('ZREM', classq(org, best_class), id)
      -- The org's counters, its prepaid usage and its ready classes, in one write.
      local classes = o[7]
      if best_last then
        classes = without_class(classes, best_class)
      end
      local gpus = parse_class(best_class).count
      local usage = (tonumber(o[5]) or 0) + math.floor(gpus * quantum * decay_factor() + 0.5)
      redis.call('HSET', orgkey(org), 'queued', int((tonumber(o[3]) or 1) - 1), 'running', int(running + 1),
        'running_gpus', int((tonumber(o[4]) or 0) + gpus), 'usage', int(usage), 'classes', classes,
        'hold_anchor', int((tonumber(o[9]) or 0) + gpus * (NOW - USAGE_EPOCH)))
      if classes == '' then
        redis.call('ZREM', FAIR, org)
      else
        redis.call('ZADD', FAIR, 'XX', score(usage, o[6]), org)
      end
      -- Read the job once (its fence and what the answer needs), then write the claim.
      local j = redis.call('HMGET', key, 'fence', unpack(CLAIMED))
      local fence = (tonumber(j[1]) or 0) + 1
      local token = fence .. '.' .. ARGV[6]
      local exp = ARGV[10]
      redis.call('HSET', key, 'status', 'PENDING', 'lease_token', token, 'lease_expires', exp,
        'agent_id', agent, 'updated_at', T, 'charged_until', ARGV[11], 'fence', int(fence), 'held_since', T)
      table.remove(j, 1)
      -- The answer shows the job as this claim left it.
      j[5], j[10], j[11] = 'PENDING', T, agent
      redis.call('ZADD', LEASES, exp, id)
      if claim_id ~= '' then
        redis.call('SET', claimkey(claim_id), id .. ' ' .. token .. ' ' .. agent, 'PX', ARGV[4])
      end
      emit(id, org, 'job.pending', 'PENDING', agent, o[8])
      j[1] = id
      local big = redis.call('MGET', cfgkey(id), seckey(id))
      return {token, j, big[1], big[2]}
    end
  end
end
-- Nothing fits: this agent waits with these GPUs free, which is what queue_reason needs.
redis.call('HSET', AGENTS, agent, ARGV[7] .. '|' .. T)
local next_ready = redis.call('ZRANGE', DELAYED, '0', '0', 'WITHSCORES')
return {'', tonumber(next_ready[2]) or 0}
