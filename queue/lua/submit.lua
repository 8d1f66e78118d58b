-- submit stores a new job, queues it in its organization's queue for its GPU class, and emits
-- job.queued. With an idempotency key, a repeat of the same body returns the first job.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] id  ARGV[5] org  ARGV[6] kind  ARGV[7] name  ARGV[8] config JSON
-- ARGV[9] max attempts  ARGV[10] max_steps (0: none)  ARGV[11] sealed secrets or ""
-- ARGV[12] priority (-100..100)  ARGV[13] GPU class ("H100:8")  ARGV[14] GPUs
-- ARGV[15] time limit (ms; 0 for none)  ARGV[16] the org's queued limit unless it has its own (0: none)
-- ARGV[17] idempotency key or ""  ARGV[18] body fingerprint  ARGV[19] idempotency TTL (ms)
-- ARGV[20] the job's rank in its class queue: (100 - priority) * 2^42 + now
-- Returns {"created", id} or {"replayed", id}. Errors: IDEMPOTENCY_CONFLICT <id>;
-- LIMIT_QUEUED <queued> <limit>.
local id, org = ARGV[4], ARGV[5]
local idem = ''
if ARGV[17] ~= '' then
  -- The organization's name is counted out, so that no organization's name and key can
  -- spell another's ("orgd" + "x:k1" against "orgd:x" + "k1").
  idem = PFX .. 'idem:' .. #org .. ':' .. org .. ':' .. ARGV[17]
  local prev = redis.call('GET', idem)
  if prev then
    local sep = string.find(prev, ' ', 1, true)
    local fp, prev_id = string.sub(prev, 1, sep - 1), string.sub(prev, sep + 1)
    if fp == ARGV[18] then
      return {'replayed', prev_id}
    end
    return redis.error_reply('IDEMPOTENCY_CONFLICT ' .. prev_id)
  end
end
-- Job ids are fresh UUIDv7s: a collision is not checked for.
local o = redis.call('HMGET', orgkey(org), 'queued', 'max_queued', 'usage', 'weight', 'classes', 'hooked')
local queued = tonumber(o[1]) or 0
local limit = tonumber(o[2]) or tonumber(ARGV[16])
if limit > 0 and queued >= limit then
  return redis.error_reply('LIMIT_QUEUED ' .. queued .. ' ' .. limit)
end
local priority, rank = ARGV[12], ARGV[20]
-- Fields a new job does not need yet are left out: attempt (1), fence (0), updated_at
-- (created_at), progress (none) and time_limit_ms (none).
redis.call('HSET', jobkey(id),
  'id', id, 'org', org, 'kind', ARGV[6], 'name', ARGV[7], 'status', 'QUEUED',
  'max_attempts', ARGV[9], 'priority', priority, 'class', ARGV[13],
  'gpus', ARGV[14], 'rank', int(rank), 'created_at', T)
redis.call('SET', cfgkey(id), ARGV[8])
if ARGV[15] ~= '0' then
  redis.call('HSET', jobkey(id), 'time_limit_ms', ARGV[15])
end
if ARGV[10] ~= '0' then
  redis.call('HSET', jobkey(id), 'max_steps', ARGV[10]) -- bounds the checkpoint steps agents report
end
if ARGV[11] ~= '' then
  redis.call('SET', seckey(id), ARGV[11])
end
redis.call('ZADD', orgkey(org) .. ':jobs', 0, id)
if not o[1] then
  redis.call('SADD', PFX .. 'orgs', org) -- a new organization
end
-- Queue it: the class queue, the org's count and ready classes (one write), the fair order.
redis.call('ZADD', classq(org, ARGV[13]), rank, id)
redis.call('HSET', orgkey(org), 'queued', int(queued + 1), 'classes', with_class(o[5], ARGV[13]))
redis.call('ZADD', FAIR, score(o[3], o[4]), org)
if idem ~= '' then
  redis.call('SET', idem, ARGV[18] .. ' ' .. id, 'PX', ARGV[19])
end
emit(id, org, 'job.queued', 'QUEUED', '', o[6])
redis.call('PUBLISH', WAKE, id)
return {'created', id}
