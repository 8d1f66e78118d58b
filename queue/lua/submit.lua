-- submit stores a new job, queues it in its organization's queue for its GPU class, and emits
-- job.queued. With an idempotency key, a repeat of the same body returns the first job.
-- KEYS[1] the job's hash (routes the call)
-- arg_max_steps 0: none; arg_config and arg_secrets ("" for none) only on a single server; arg_priority -100..100; arg_class "H100:8";
-- arg_time_limit ms, 0 for none; arg_idem_key "" for none; arg_idem_ttl ms; arg_rank the job's
-- rank in its class queue: (100 - priority) * 2^42 + now.
-- arg_cfg_bytes and arg_sec_bytes the sizes of the config and sealed secrets, counted in what
-- the org holds in Redis (over its bound: LIMIT_BYTES).
-- Returns {"created", id} or {"replayed", id}. Errors: IDEMPOTENCY_CONFLICT <id>;
-- LIMIT_QUEUED <queued> <limit>; LIMIT_BYTES <bytes> <limit>.
local id, org = arg_id, arg_org
local idem = ''
if arg_idem_key ~= '' then
  -- The organization's name is counted out, so that no organization's name and key can
  -- spell another's ("orgd" + "x:k1" against "orgd:x" + "k1").
  idem = idemkey(#org .. ':' .. org .. ':' .. arg_idem_key)
  local prev = redis.call('GET', idem)
  if prev then
    local sep = string.find(prev, ' ', 1, true)
    local fp, prev_id = string.sub(prev, 1, sep - 1), string.sub(prev, sep + 1)
    if fp == arg_fingerprint then
      return {'replayed', prev_id}
    end
    return redis.error_reply('IDEMPOTENCY_CONFLICT ' .. prev_id)
  end
end
-- Job ids are fresh UUIDv7s: a collision is not checked for.
local o = redis.call('HMGET', orgkey(org), 'queued', 'max_queued', 'hooked')
local queued = tonumber(o[1]) or 0
local limit = tonumber(o[2]) or DEF_QUEUED
if limit > 0 and queued >= limit then
  return redis.error_reply('LIMIT_QUEUED ' .. queued .. ' ' .. limit)
end
local held = JOB_BYTES + tonumber(arg_cfg_bytes) + tonumber(arg_sec_bytes)
local cur_bytes, max_bytes = over_bytes(org, held)
if cur_bytes then
  return redis.error_reply('LIMIT_BYTES ' .. cur_bytes .. ' ' .. max_bytes)
end
-- Fields a new job does not need yet are left out: attempt (1), fence (0), updated_at
-- (created_at), progress (none), and time_limit_ms and max_steps when there are none.
local fields = {F.id, id, F.org, org, F.kind, arg_kind, F.name, arg_name, F.status, 'QUEUED',
  F.max_attempts, arg_max_attempts, F.priority, arg_priority, F.class, arg_class,
  F.gpus, arg_gpus, F.rank, arg_rank, F.created_at, T, F.cfg_bytes, arg_cfg_bytes, F.sec_bytes, arg_sec_bytes}
if arg_time_limit ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.time_limit_ms, arg_time_limit
end
if arg_budget_ms ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.budget_ms, arg_budget_ms -- heartbeat.lua stops the job at it
end
if arg_by ~= '' then
  fields[#fields + 1], fields[#fields + 2] = F.by, arg_by -- usage by user
end
if arg_token ~= '' then
  fields[#fields + 1], fields[#fields + 2] = F.token, arg_token -- usage by token
end
if arg_price_micro ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.price, arg_price_micro -- $ per GPU-hour × 1e6, for usage's cost
end
if arg_est_ms ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.est_ms, arg_est_ms -- a claim holds it past its org's monthly budget
end
if arg_needs ~= '' then
  fields[#fields + 1], fields[#fields + 2] = F.needs, arg_needs -- a claim prefers a node that holds them
end
if arg_weights ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.weights, arg_weights -- how long it may wait for a node that holds them
end
if arg_max_steps ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.max_steps, arg_max_steps -- bounds the steps agents report
end
redis.call('HSET', jobkey(id), unpack(fields))
-- The config and secrets go to the job's own slot: here on a single server; on a cluster the
-- caller wrote them there before this call (and passes neither).
if not SPLIT then
  if arg_secrets ~= '' then
    redis.call('MSET', owncfg(id), arg_config, ownsec(id), arg_secrets)
  else
    redis.call('SET', owncfg(id), arg_config)
  end
end
redis.call('ZADD', orgjobs(org), 0, id)
index_job(id, org, arg_kind, 'QUEUED')
if not o[1] then
  if redis.call('SCARD', ORGS) == 0 then
    -- The store's first job: written as jobs have their own slots, so nothing to migrate
    -- (migrate.go).
    redis.call('HSETNX', META, 'own_done', '1')
  end
  redis.call('SADD', ORGS, org) -- a new organization
end
redis.call('HSET', orgkey(org), 'queued', int(queued + 1))
hold(org, held)
if idem ~= '' then
  redis.call('SET', idem, arg_fingerprint .. ' ' .. id, 'PX', arg_idem_ttl)
end
emit(id, org, 'job.queued', 'QUEUED', '', o[3])
enqueue(id, org, arg_class, arg_rank)
return {'created', id}
