-- heartbeat renews a lease, records progress, charges the GPU time used since the last charge,
-- moves PENDING to RUNNING when the agent says the pipeline runs (starting the time limit's
-- clock), and emits job.checkpoint for newly committed checkpoint steps (see checkpoints).
-- The lease's entry in LEASES is moved only when it would come due within half a lease
-- (lease_filed is where it stands), so a healthy job never comes due before the reaper and
-- costs it nothing, at one index write per two heartbeats.
-- KEYS[1] the job's hash (routes the call)
-- arg_lease_expires the renewed lease's expiry (ms); arg_lease_ttl ms; arg_running "1" if the
-- pipeline runs; arg_progress JSON or ""; arg_pipeline "" or the pipeline; arg_emulated "1" if
-- emulated; arg_upstream the upstream versions the agent runs (JSON) or ""; arg_log_bytes the
-- bytes of log the attempt has stored (0: not said); arg_alerts the agent's alerts, JSON
-- [{type, detail}] (queue.alertsArg), or "": each becomes an event of its type;
-- ARGV[REST..] committed checkpoint steps, ascending.
-- Returns {action ("continue", "stop", or "release" on a node being drained), lease expiry ms}; errors LEASE_LOST if the token is not the current one,
-- STEP_BEYOND <max_steps> if a step is beyond the job's max_steps (nothing is changed).
local id = arg_id
local key = jobkey(id)
local cur = redis.call('HMGET', key, F.lease_token, F.status, F.stop_requested, F.org,
  F.started_at, F.gpus, F.charged_until, F.time_limit_ms, F.step_backlog, F.kind, F.lease_filed, F.agent_id,
  F.budget_ms, F.gpu_ms, F.held_since, F.budget_seen)
if lease_lost(cur[1], cur[2], arg_token) then
  return LEASE_LOST
end
local beyond = steps_beyond(id, REST)
if beyond then
  return redis.error_reply('STEP_BEYOND ' .. beyond)
end
local org, status = cur[4], cur[2]
local exp = arg_lease_expires
local since = tonumber(cur[7]) or NOW
local fields = {F.lease_expires, exp, F.updated_at, T}
if NOW > since then
  fields[#fields + 1], fields[#fields + 2] = F.charged_until, T
end
if (tonumber(cur[11]) or 0) < NOW + tonumber(arg_lease_ttl) / 2 then
  redis.call('ZADD', LEASES, exp, id)
  fields[#fields + 1], fields[#fields + 2] = F.lease_filed, exp
end
if arg_progress ~= '' then
  redis.call('SET', progkey(id), arg_progress)
end
if arg_pipeline ~= '' then
  fields[#fields + 1], fields[#fields + 2] = F.pipeline, arg_pipeline
  fields[#fields + 1], fields[#fields + 2] = F.emulated, arg_emulated
end
if arg_upstream ~= '' then
  fields[#fields + 1], fields[#fields + 2] = F.upstream, arg_upstream
end
if arg_log_bytes ~= '0' then
  fields[#fields + 1], fields[#fields + 2] = F.log_bytes, arg_log_bytes
end
local starts = arg_running == '1' and status == 'PENDING'
if starts then
  status = 'RUNNING'
  fields[#fields + 1], fields[#fields + 2] = F.status, status
  if not cur[5] then
    fields[#fields + 1], fields[#fields + 2] = F.started_at, T
  end
end
redis.call('HSET', key, unpack(fields))
if starts then
  index_job(id, org, cur[10], status)
  local limit = tonumber(cur[8]) or 0
  if limit > 0 then
    redis.call('ZADD', DEADLINES, NOW + limit, id)
  end
  emit(id, org, 'job.started', status, '')
end
local ob -- the org's monthly budget, when this heartbeat charged it (charge)
if NOW > since then
  ob = charge(org, (tonumber(cur[6]) or 0) * (NOW - since))
end
checkpoints(id, org, status, REST, cur[9])
if arg_alerts ~= '' then
  for _, a in ipairs(cjson.decode(arg_alerts)) do
    emit(id, org, a.type, status, a.detail)
  end
end
if cur[3] == '1' then
  return {'stop', exp}
end
-- marks emits job.budget for each of 50, 80 and 100 % of budget that used has reached and
-- seen (the highest announced) has not, naming whose budget it is; it answers the new seen.
local function marks(used, budget, seen, whose)
  local pct = math.floor(100 * used / budget)
  for _, mark in ipairs({50, 80, 100}) do
    if pct >= mark and seen < mark then
      seen = mark
      emit(id, org, 'job.budget', status, mark .. ' % of ' .. whose .. ' budget used: ' ..
        string.format('%.4f of %.4f GPU-hours', used / 3600000, budget / 3600000))
    end
  end
  return seen
end
-- stop_for tells the job to stop as a user's stop is (STOPPING, the grace), for reason.
local function stop_for(reason, detail)
  local deadline = NOW + tonumber(arg_grace)
  redis.call('HSET', key, F.stop_requested, 1, F.stop_reason, reason, F.stop_deadline, deadline)
  redis.call('ZADD', STOPPING, deadline, id)
  emit(id, org, 'job.stopping', status, detail)
  return {'stop', exp}
end
-- A budget: job.budget at 50, 80 and 100 % of it (each once), and at 100 % the job is told to
-- stop, with the reason `budget`.
local budget = tonumber(cur[13])
if budget and budget > 0 then
  local used = (tonumber(cur[14]) or 0) + (tonumber(cur[6]) or 0) * math.max(0, NOW - (tonumber(cur[15]) or NOW))
  local seen = marks(used, budget, tonumber(cur[16]) or 0, 'its')
  if seen ~= (tonumber(cur[16]) or 0) then
    redis.call('HSET', key, F.budget_seen, seen)
  end
  if used >= budget then
    return stop_for('budget', 'its budget is spent')
  end
end
-- The organization's monthly budget: job.budget on the job whose charge crossed 50, 80 or
-- 100 % of it (each once a month), and once it is spent the organization is held (nothing of it
-- claimed) and each of its running jobs told to stop at its next charge, reason `org_budget`.
if ob and ob.budget > 0 then
  local seen = marks(ob.spent, ob.budget, ob.seen, "the organization's monthly")
  if seen ~= ob.seen then
    redis.call('HSET', orgkey(org), 'month_seen', seen)
  end
  if ob.spent >= ob.budget then
    if not ob.held then
      hold_org(org, ob.classes)
    end
    return stop_for('org_budget', "its organization's monthly budget is spent")
  end
end
-- A node being drained by its operator hands its jobs back (release), to resume elsewhere.
local node = cur[12] and redis.call('HGET', NODES, cur[12])
if node and string.sub(node, 1, 9) == 'draining|' then
  return {'release', exp}
end
return {'continue', exp}
