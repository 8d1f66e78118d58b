-- reap does the queue's timed work, a batch of each at a time:
--   lapsed leases: back to the queue after a backoff, attempt + 1, to resume from the newest
--     checkpoint (job.retrying); FAILED once max_attempts leases are lost;
--   stops whose grace ended without the agent confirming: STOPPED (or queued, for a restart);
--   time limits reached: the job is told to stop, and FAILS when it has;
--   retry backoffs that are over: back into their queues;
--   the usage reference frame, rebased before its scale factor grows large.
-- KEYS[1] the leases index (routes the call)
-- ARGV[4] batch size  ARGV[5] backoff base (ms)  ARGV[6] backoff cap (ms)
-- ARGV[7] a random number in [0, 1) for jitter  ARGV[8] stop grace (ms)
-- Returns the number of jobs changed.
local batch, base, cap, rnd, grace = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local changed = 0

-- ended runs the end of a stop: a restart queues the job again, a time limit fails it, a user
-- stop stops it.
local function ended(id, org, stop_reason, restart, why)
  if restart then
    restart_job(id, org)
  elseif stop_reason == 'time_limit' then
    finish_as(id, org, 'FAILED', 'job.failed', 'stopped at its time limit; ' .. why)
  else
    finish_as(id, org, 'STOPPED', 'job.stopped', why)
  end
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', T, 'LIMIT', '0', ARGV[4])) do
  local key = jobkey(id)
  local j = jobfields(id, {'status', 'lease_expires', 'stop_requested', 'stop_reason',
    'restart_requested', 'attempt', 'max_attempts', 'org', 'class', 'rank', 'checkpoint_step', 'agent_id',
    'gpus', 'charged_until', 'time_limit_ms'})
  local cur = {j.status, j.lease_expires, j.stop_requested, j.stop_reason, j.restart_requested,
    j.attempt, j.max_attempts, j.org, j.class, j.rank, j.checkpoint_step, j.agent_id}
  local renewed = is_live(cur[1]) and tonumber(cur[2]) and tonumber(cur[2]) > NOW
  if renewed then
    -- Heartbeats renewed it since it was filed: file it under its real expiry.
    redis.call('ZADD', LEASES, cur[2], id)
  elseif is_live(cur[1]) then
    local org = cur[8]
    release(id, j)
    changed = changed + 1
    local attempt, max = tonumber(cur[6]) or 1, tonumber(cur[7])
    if cur[3] == '1' then
      ended(id, org, cur[4], cur[5] == '1', 'the agent did not confirm the stop before its lease ran out')
    elseif attempt >= max then
      finish_as(id, org, 'FAILED', 'job.failed',
        'lease lost ' .. attempt .. ' times (the agent stopped heartbeating); giving up')
    else
      local delay = math.min(base * 2 ^ (attempt - 1), cap)
      delay = math.floor(delay * (0.8 + 0.4 * rnd))
      redis.call('HSET', key, 'attempt', attempt + 1, 'resume_step', tonumber(cur[11]) or 0)
      redis.call('HDEL', key, 'agent_id')
      requeue(id, org, cur[9], tonumber(cur[10]), delay)
      local detail = 'lease expired on ' .. (cur[12] or 'its agent') .. '; attempt ' .. (attempt + 1) .. ' of ' .. max ..
        ' in ' .. math.floor(delay / 1000) .. 's'
      if cur[11] then
        detail = detail .. ', from the checkpoint of step ' .. cur[11]
      end
      emit(id, org, 'job.retrying', 'QUEUED', detail)
    end
  else
    redis.call('ZREM', LEASES, id)
  end
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', STOPPING, '-inf', T, 'LIMIT', '0', ARGV[4])) do
  local j = jobfields(id, {'status', 'stop_requested', 'stop_reason', 'restart_requested', 'org',
    'gpus', 'charged_until', 'time_limit_ms'})
  if is_live(j.status) and j.stop_requested == '1' then
    release(id, j)
    changed = changed + 1
    ended(id, j.org, j.stop_reason, j.restart_requested == '1', 'the agent did not stop within its grace period')
  else
    redis.call('ZREM', STOPPING, id)
  end
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', T, 'LIMIT', '0', ARGV[4])) do
  redis.call('ZREM', DEADLINES, id)
  local cur = redis.call('HMGET', jobkey(id), 'status', 'stop_requested', 'org', 'time_limit_ms')
  if is_live(cur[1]) and cur[2] ~= '1' then
    local deadline = NOW + grace
    redis.call('HSET', jobkey(id), 'stop_requested', 1, 'stop_reason', 'time_limit', 'stop_deadline', deadline)
    redis.call('ZADD', STOPPING, deadline, id)
    emit(id, cur[3], 'job.stopping', cur[1], 'time limit of ' .. math.floor(tonumber(cur[4]) / 60000) .. ' min reached')
    changed = changed + 1
  end
end

changed = changed + promote(ARGV[4])

local tref = tonumber(redis.call('HGET', META, 'tref'))
if tref and (NOW - tref) / TAU > 10 then
  local f = math.exp(-(NOW - tref) / TAU)
  for _, org in ipairs(redis.call('SMEMBERS', PFX .. 'orgs')) do
    local u = tonumber(redis.call('HGET', orgkey(org), 'usage'))
    if u then
      redis.call('HSET', orgkey(org), 'usage', int(math.floor(u * f + 0.5)))
      redis.call('ZADD', FAIR, 'XX', fair_score(org), org)
    end
  end
  -- The scale factor is exactly 1 again at NOW.
  redis.call('HSET', META, 'tref', T)
end
if changed > 0 then
  redis.call('PUBLISH', WAKE, 'reap')
end
return changed
