-- submit stores a new job, indexes it under its organization, queues it and emits job.queued.
-- KEYS[1] job hash        KEYS[2] job events     KEYS[3] outbox
-- KEYS[4] org jobs zset   KEYS[5] queued zset
-- ARGV[1] id  ARGV[2] org  ARGV[3] kind  ARGV[4] name  ARGV[5] config JSON  ARGV[6] now (ms)
-- ARGV[7] max attempts  ARGV[8] progress JSON  ARGV[9] wake channel
-- ARGV[10] sealed secrets or "" (stored as is; returned only by claim)
-- Returns the job hash as a flat array; error EXISTS if the id is taken.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('EXISTS job id taken')
end
local id, org, now = ARGV[1], ARGV[2], ARGV[6]
redis.call('HSET', KEYS[1],
  'id', id, 'org', org, 'kind', ARGV[3], 'name', ARGV[4], 'status', 'QUEUED',
  'config', ARGV[5], 'attempt', 1, 'max_attempts', ARGV[7], 'progress', ARGV[8],
  'created_at', now, 'updated_at', now, 'fence', 0, 'event_seq', 0)
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'secrets', ARGV[10])
end
redis.call('ZADD', KEYS[4], 0, id)
redis.call('ZADD', KEYS[5], now, id)
emit(KEYS[1], KEYS[2], KEYS[3], id, org, 'job.queued', 'QUEUED', now, '')
redis.call('PUBLISH', ARGV[9], id)
return redis.call('HGETALL', KEYS[1])
