-- reap does the queue's timed work, a batch of each at a time:
--   lapsed leases: back to the queue after a backoff, attempt + 1, to resume from the newest
--     checkpoint (job.retrying); FAILED once max_attempts leases are lost;
--   stops whose grace ended without the agent confirming: STOPPED (or queued, for a restart);
--   time limits reached: the job is told to stop, and FAILS when it has;
--   retry backoffs that are over: back into their queues;
--   waiting claims whose wait ended and agents not seen for arg_agent_ttl (ms): dropped;
--   the usage reference frame, rebased before its scale factor grows large.
-- KEYS[1] the leases index (routes the call)
-- arg_batch the most entries of each index one call handles; arg_backoff_base and
-- arg_backoff_cap ms; arg_jitter a random number in [0, 1); arg_grace the stop grace (ms).
-- Returns {jobs changed, 1 if an index had more due than the batch (call again) else 0}.
local batch, base, cap, rnd, grace = tonumber(arg_batch), tonumber(arg_backoff_base), tonumber(arg_backoff_cap),
  tonumber(arg_jitter), tonumber(arg_grace)
local changed, more = 0, 0

-- due returns the first batch of an index's entries due by now, noting whether it was full.
local function due(index, upto)
  local list = redis.call('ZRANGEBYSCORE', index, '-inf', upto or T, 'LIMIT', '0', arg_batch)
  if #list >= batch then
    more = 1
  end
  return list
end

-- ended runs the end of a stop: a restart queues the job again, a time limit fails it, a user
-- stop stops it.
local function ended(id, org, kind, stop_reason, restart, why)
  if restart then
    restart_job(id, org)
  elseif stop_reason == 'time_limit' then
    redis.call('HSET', jobkey(id), F.failure, failure_json('time_limit', 'user', 1,
      "the job's time limit was reached (raise time_limit to run longer)", 'service: ' .. why,
      redis.call('HGET', jobkey(id), F.attempt), false))
    finish_as(id, org, kind, 'FAILED', 'job.failed', 'stopped at its time limit; ' .. why)
  else
    finish_as(id, org, kind, 'STOPPED', 'job.stopped', why)
  end
end

local LAPSED_FIELDS = {F.status, F.lease_expires, F.stop_requested, F.stop_reason, F.restart_requested, F.org,
  F.gpus, F.charged_until, F.time_limit_ms, F.held_since, F.gpu_ms, F.kind, unpack(RETRY_FIELDS)}
-- lost is the failure analysis of an attempt whose agent went silent (failure.NodeLost's).
local function lost(agent, attempt, retried)
  return failure_json('node_lost', 'platform', 0.9, 'the node running the job stopped answering (its lease lapsed)',
    'service: no heartbeat from ' .. agent .. ' before its lease ran out', attempt, retried)
end
for _, id in ipairs(due(LEASES)) do
  local key = jobkey(id)
  local j = jobfields(id, LAPSED_FIELDS)
  local exp = tonumber(j.lease_expires)
  if is_live(j.status) and exp and exp > NOW then
    -- Heartbeats renewed it since it was filed (and then stopped, or came late): file it under
    -- its real expiry.
    redis.call('ZADD', LEASES, j.lease_expires, id)
    redis.call('HSET', key, F.lease_filed, j.lease_expires)
  elseif is_live(j.status) then
    local org = j.org
    local attempt, max = tonumber(j.attempt) or 1, tonumber(j.max_attempts) or 1
    local agent = j.agent_id or 'its agent'
    release(id, j)
    changed = changed + 1
    node_fault(j.agent_id, id, org, 'lost', 0, tonumber(arg_quarantine_window))
    if j.stop_requested == '1' then
      ended(id, org, j.kind, j.stop_reason, j.restart_requested == '1',
        'the agent did not confirm the stop before its lease ran out')
    elseif attempt >= max then
      redis.call('HSET', key, F.failure, lost(agent, attempt, false))
      finish_as(id, org, j.kind, 'FAILED', 'job.failed',
        'lease lost ' .. attempt .. ' times (the agent stopped heartbeating); giving up')
    else
      redis.call('HSET', key, F.failure, lost(agent, attempt, true))
      retry_attempt(id, j, 'lease expired on ' .. agent, base, cap, rnd, tonumber(arg_avoid_ms))
    end
  else
    redis.call('ZREM', LEASES, id)
  end
end

for _, id in ipairs(due(STOPPING)) do
  local j = jobfields(id, {F.status, F.stop_requested, F.stop_reason, F.restart_requested, F.org,
    F.gpus, F.charged_until, F.time_limit_ms, F.held_since, F.gpu_ms, F.kind})
  if is_live(j.status) and j.stop_requested == '1' then
    release(id, j)
    changed = changed + 1
    ended(id, j.org, j.kind, j.stop_reason, j.restart_requested == '1', 'the agent did not stop within its grace period')
  else
    redis.call('ZREM', STOPPING, id)
  end
end

for _, id in ipairs(due(DEADLINES)) do
  redis.call('ZREM', DEADLINES, id)
  local cur = redis.call('HMGET', jobkey(id), F.status, F.stop_requested, F.org, F.time_limit_ms)
  if is_live(cur[1]) and cur[2] ~= '1' then
    local deadline = NOW + grace
    redis.call('HSET', jobkey(id), F.stop_requested, 1, F.stop_reason, 'time_limit', F.stop_deadline, deadline)
    redis.call('ZADD', STOPPING, deadline, id)
    emit(id, cur[3], 'job.stopping', cur[1], 'time limit of ' .. math.floor(tonumber(cur[4]) / 60000) .. ' min reached')
    changed = changed + 1
  end
end

local promoted = promote(arg_batch)
changed = changed + promoted
if promoted >= batch then
  more = 1
end

for _, w in ipairs(due(WAITING)) do
  unwait(w)
end
for _, agent in ipairs(due(AGENTS_SEEN, '(' .. int(NOW - tonumber(arg_agent_ttl)))) do
  forget_agent(agent)
end
-- An organization held for its spent monthly budget runs again when its month ends.
for _, org in ipairs(due(BUDGET_HELD)) do
  redis.call('ZREM', BUDGET_HELD, org)
  redis.call('HDEL', orgkey(org), 'held')
  local o = redis.call('HMGET', orgkey(org), 'classes', 'usage', 'weight', 'running', 'max_running')
  local room = has_room(o[4], o[5])
  refile(org, o[1], room, score(o[2], o[3]))
  if room then
    wake_org(org, o[1], 1000)
  end
end

-- A store written before the fair order was kept per GPU class (issue 16) has one order of
-- every org with ready jobs, PFX .. 'fair': its orgs are filed in the per-class orders (and the
-- per-class counts made) once, here, and the old order goes.
local old_fair = PFX .. 'fair'
if redis.call('EXISTS', old_fair) == 1 then
  for _, org in ipairs(redis.call('ZRANGE', old_fair, 0, -1)) do
    local o = redis.call('HMGET', orgkey(org), 'classes', 'usage', 'weight', 'running', 'max_running', 'held')
    for _, class in ipairs(split_classes(o[1])) do
      redis.call('SADD', CLASSES, class)
      redis.call('HINCRBY', READY, class, redis.call('ZCARD', classq(org, class)))
    end
    refile(org, o[1], has_room(o[4], o[5], o[6]), score(o[2], o[3]))
  end
  redis.call('DEL', old_fair)
end

-- Jobs stored before List's index existed (issue 16) are filed in it, a batch a pass. META's
-- `indexed` is "1" once every organization's jobs are; until then `ix_cursor` (SSCAN over
-- the orgs: "done" after the last step), `ix_orgs` (the orgs of the step, space-separated, the
-- first being filed) and `ix_after` (the last id filed of it) say where the filing left off.
local ix = redis.call('HMGET', META, 'indexed', 'ix_cursor', 'ix_orgs', 'ix_after')
if ix[1] ~= '1' then
  local cursor, orgs, after = ix[2] or '0', ix[3] or '', ix[4] or ''
  local left = batch
  while left > 0 and not (orgs == '' and cursor == 'done') do
    if orgs == '' then
      local r = redis.call('SSCAN', ORGS, cursor, 'COUNT', 10)
      cursor = r[1]
      if cursor == '0' then
        cursor = 'done'
      end
      orgs = table.concat(r[2], ' ')
      left = left - 1
    else
      local here, rest = string.match(orgs, '^(%S+)%s*(.*)$')
      local start = '-'
      if after ~= '' then
        start = '(' .. after
      end
      local ids = redis.call('ZRANGE', orgjobs(here), start, '+', 'BYLEX', 'LIMIT', 0, left)
      for _, id in ipairs(ids) do
        local j = redis.call('HMGET', jobkey(id), F.kind, F.status)
        if j[2] then
          index_job(id, here, j[1], j[2])
        end
      end
      left = left - #ids
      if #ids > 0 then
        after = ids[#ids]
      end
      if left > 0 then
        orgs, after = rest, '' -- every job of this org is filed
      end
    end
  end
  if orgs == '' and cursor == 'done' then
    redis.call('HSET', META, 'indexed', '1')
    redis.call('HDEL', META, 'ix_cursor', 'ix_orgs', 'ix_after')
  else
    redis.call('HSET', META, 'ix_cursor', cursor, 'ix_orgs', orgs, 'ix_after', after)
    more = 1
  end
end

local tref = tonumber(redis.call('HGET', META, 'tref'))
if tref and (NOW - tref) / TAU > 10 then
  local f = math.exp(-(NOW - tref) / TAU)
  for _, org in ipairs(redis.call('SMEMBERS', ORGS)) do
    local o = redis.call('HMGET', orgkey(org), 'usage', 'weight', 'classes')
    local u = tonumber(o[1])
    if u then
      u = math.floor(u * f + 0.5)
      redis.call('HSET', orgkey(org), 'usage', int(u))
      rescore(org, o[3], score(u, o[2]))
    end
  end
  -- The scale factor is exactly 1 again at NOW.
  redis.call('HSET', META, 'tref', T)
end
return {changed, more}
