-- claim hands the oldest queued job to an agent under a new lease and emits job.pending.
-- KEYS[1] queued zset   KEYS[2] leases zset   KEYS[3] outbox
-- ARGV[1] key prefix ("{tag}:")  ARGV[2] now (ms)  ARGV[3] lease TTL (ms)  ARGV[4] agent id
-- ARGV[5] random token part
-- Returns false when nothing is queued, else {lease token, job hash as a flat array}.
-- The lease token is "<fence>.<random>": the fence grows with every claim of the job.
local prefix, now, ttl, agent = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
while true do
  local ids = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #ids == 0 then
    return false
  end
  local id = ids[1]
  redis.call('ZREM', KEYS[1], id)
  local jobkey = prefix .. 'job:' .. id
  local cur = redis.call('HMGET', jobkey, 'status', 'org')
  -- A queue entry whose job is gone or no longer queued is dropped, never handed out.
  if cur[1] == 'QUEUED' then
    local fence = redis.call('HINCRBY', jobkey, 'fence', 1)
    local token = fence .. '.' .. ARGV[5]
    local exp = now + ttl
    redis.call('HSET', jobkey, 'status', 'PENDING', 'lease_token', token, 'lease_expires', exp,
      'agent_id', agent, 'updated_at', now)
    redis.call('ZADD', KEYS[2], exp, id)
    emit(jobkey, prefix .. 'ev:' .. id, KEYS[3], id, cur[2], 'job.pending', 'PENDING', now, agent)
    return {token, redis.call('HGETALL', jobkey)}
  end
end
