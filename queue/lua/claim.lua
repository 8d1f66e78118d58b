-- claim hands an agent the next job that fits its free GPUs, in weighted fair order: the
-- organizations with ready jobs from the least decayed usage per weight up, skipping those at
-- their running limit; within one, the best-ranked job (priority, then age) among the heads
-- of its GPU-class queues that fit. A job that does not fit never blocks one that does.
-- KEYS[1] the leases index (routes the call)
-- ARGV[4] lease TTL (ms)  ARGV[5] agent id  ARGV[6] random part of the token
-- ARGV[7] free GPUs, "H100:8,A100:2" ("" for none)  ARGV[8] default running limit (0: none)
-- ARGV[9] usage prepaid at claim (ms of each GPU)
-- Returns {lease token, job hash as a flat array}; the token is "<fence>.<random>", and the
-- fence grows with every claim of the job. When nothing fits: {"", the time (ms) the next
-- retry backoff ends, or 0}, so a waiting claim knows when to look again.
local ttl, agent, quantum = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[9])
promote(100)
redis.call('HSET', AGENTS, agent, ARGV[7] .. '|' .. NOW)

local free = {}
for model, count in string.gmatch(ARGV[7], '([^:,]+):(%d+)') do
  free[string.upper(model)] = (free[string.upper(model)] or 0) + tonumber(count)
end
local function fits(class)
  local model, count = string.match(class, '^(.*):(%d+)$')
  count = tonumber(count)
  return count == 0 or (free[string.upper(model)] or 0) >= count
end

local default_limit = tonumber(ARGV[8])
for _, org in ipairs(redis.call('ZRANGE', FAIR, 0, -1)) do
  local o = redis.call('HMGET', orgkey(org), 'running', 'max_running')
  local limit = tonumber(o[2]) or default_limit
  if limit == 0 or (tonumber(o[1]) or 0) < limit then
    local best, best_rank, best_class
    for _, class in ipairs(redis.call('SMEMBERS', classset(org))) do
      if fits(class) then
        local head = redis.call('ZRANGE', classq(org, class), 0, 0, 'WITHSCORES')
        if head[1] and (not best or tonumber(head[2]) < best_rank) then
          best, best_rank, best_class = head[1], tonumber(head[2]), class
        end
      end
    end
    if best then
      local id, key = best, jobkey(best)
      unqueue(id, org, best_class)
      local gpus = tonumber(redis.call('HGET', key, 'gpus')) or 0
      redis.call('HINCRBY', orgkey(org), 'queued', -1)
      redis.call('HINCRBY', orgkey(org), 'running', 1)
      redis.call('HINCRBY', orgkey(org), 'running_gpus', gpus)
      charge(org, gpus * quantum)
      local fence = redis.call('HINCRBY', key, 'fence', 1)
      local token = fence .. '.' .. ARGV[6]
      local exp = NOW + ttl
      redis.call('HSET', key, 'status', 'PENDING', 'lease_token', token, 'lease_expires', exp,
        'agent_id', agent, 'updated_at', NOW, 'charged_until', NOW + quantum)
      redis.call('ZADD', LEASES, exp, id)
      emit(id, org, 'job.pending', 'PENDING', agent)
      return {token, redis.call('HGETALL', key)}
    end
  end
end
local next_ready = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
return {'', tonumber(next_ready[2]) or 0}
