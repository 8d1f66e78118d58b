-- submit stores a new job, queues it in its organization's queue for its GPU class, and emits
-- job.queued. With an idempotency key, a repeat of the same body returns the first job.
-- KEYS[1] the job's hash (routes the call)
-- ARGV[4] id  ARGV[5] org  ARGV[6] kind  ARGV[7] name  ARGV[8] config JSON
-- ARGV[9] max attempts  ARGV[10] progress JSON  ARGV[11] sealed secrets or ""
-- ARGV[12] priority (-100..100)  ARGV[13] GPU class ("H100:8")  ARGV[14] GPUs
-- ARGV[15] time limit (ms; 0 for none)  ARGV[16] the org's queued limit unless it has its own (0: none)
-- ARGV[17] idempotency key or ""  ARGV[18] body fingerprint  ARGV[19] idempotency TTL (ms)
-- Returns {"created", id} or {"replayed", id}. Errors: EXISTS; IDEMPOTENCY_CONFLICT <id>;
-- LIMIT_QUEUED <queued> <limit>.
local id, org = ARGV[4], ARGV[5]
local idem = ''
if ARGV[17] ~= '' then
  idem = PFX .. 'idem:' .. org .. ':' .. ARGV[17]
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
if redis.call('EXISTS', jobkey(id)) == 1 then
  return redis.error_reply('EXISTS job id taken')
end
local o = redis.call('HMGET', orgkey(org), 'queued', 'max_queued')
local queued = tonumber(o[1]) or 0
local limit = tonumber(o[2]) or tonumber(ARGV[16])
if limit > 0 and queued >= limit then
  return redis.error_reply('LIMIT_QUEUED ' .. queued .. ' ' .. limit)
end
local priority = tonumber(ARGV[12])
local rank = (100 - priority) * RANK_BASE + NOW
redis.call('HSET', jobkey(id),
  'id', id, 'org', org, 'kind', ARGV[6], 'name', ARGV[7], 'status', 'QUEUED',
  'config', ARGV[8], 'attempt', 1, 'max_attempts', ARGV[9], 'progress', ARGV[10],
  'priority', priority, 'class', ARGV[13], 'gpus', ARGV[14], 'rank', int(rank),
  'time_limit_ms', ARGV[15], 'created_at', NOW, 'updated_at', NOW, 'fence', 0, 'event_seq', 0)
if ARGV[11] ~= '' then
  redis.call('HSET', jobkey(id), 'secrets', ARGV[11])
end
redis.call('ZADD', orgkey(org) .. ':jobs', 0, id)
redis.call('SADD', PFX .. 'orgs', org)
redis.call('HINCRBY', orgkey(org), 'queued', 1)
enqueue(id, org, ARGV[13], rank)
if idem ~= '' then
  redis.call('SET', idem, ARGV[18] .. ' ' .. id, 'PX', ARGV[19])
end
emit(id, org, 'job.queued', 'QUEUED', '')
redis.call('PUBLISH', WAKE, id)
return {'created', id}
