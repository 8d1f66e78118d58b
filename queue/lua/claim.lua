-- claim hands an agent the next job that fits its free GPUs, in weighted fair order: of the
-- organizations with a job ready in a class that fits and room to run one more, the one with
-- the least decayed usage per weight; within it, the best-ranked job (priority, then age) among
-- the heads of its GPU-class queues that fit. A job that does not fit never blocks one that
-- does. The work is one look per GPU class that fits (fair:<class> keeps only organizations
-- with room), however many organizations wait or sit at their limit.
-- KEYS[1] the leases index (routes the call)
-- arg_lease_ttl ms; arg_token_rand the random part of the token; arg_free "H100:8,A100:2" (""
-- for none); arg_quantum usage prepaid at claim (ms of each GPU); arg_lease_expires and
-- arg_paid_until ms; arg_gpu_only "1": only jobs that need a GPU (the agent runs as many
-- GPU-less jobs as it will); arg_claim_id "" or the agent's claim id: a claim made is recorded
-- under it, and a claim the agent already abandoned takes nothing (abandon.lua); arg_waiter ""
-- or the waiter to file when nothing fits (see wait_for_work), waiting until arg_wait_until;
-- arg_filed "1" if an earlier look filed it, for a claim made to take it back; arg_health ""
-- or what the agent's failed check of its node found (node_fault, with arg_quarantine_after and
-- arg_quarantine_window).
-- Returns {lease token, the job's CLAIMED fields in order, config, sealed secrets or false};
-- the token is "<fence>.<random>", and the fence grows with every claim of the job. When
-- nothing fits: {"", the time (ms) the next retry backoff ends, or 0}, so a waiting claim knows
-- when to look again.
-- CLAIMED (generated from queue.go's claimedFields) are the job fields a claim answers with.
local agent, quantum = arg_agent, tonumber(arg_quantum)
if arg_claim_id ~= '' and redis.call('EXISTS', claimkey(arg_claim_id)) == 1 then
  return {'', 0}
end
-- An agent whose own check of its node failed (arg_health: what it found) takes nothing: the
-- failure counts against the node as a job's would, and quarantines it.
if arg_health ~= '' then
  node_fault(agent, 'before a claim: ' .. arg_health, '', 'check', tonumber(arg_quarantine_after), tonumber(arg_quarantine_window))
end
-- A node out of rotation (cordoned, quarantined, draining) takes nothing, and is not counted as
-- capacity; its claim looks again now and then.
if arg_health ~= '' or redis.call('HEXISTS', NODES, agent) == 1 then
  forget_agent(agent)
  drop_holder(agent)
  if arg_filed == '1' then
    unwait(arg_waiter)
  end
  return {'', 0}
end
promote('100')

local free = parse_free(arg_free)
local gpu_only = arg_gpu_only == '1'
local function fits(class)
  local c = parse_class(class)
  if c.count == 0 then
    return not gpu_only
  end
  return (free[c.model] or 0) >= c.count
end

-- A job retried after a platform fault on this agent's node avoids it for a while
-- (retry_attempt), and a job expected to take more than what is left of its organization's
-- monthly budget is held (over_budget): the claim passes over such jobs, and over an
-- organization that has only such jobs ready, to the next in order, so the node takes other
-- work meanwhile. It passes over
-- a few at most (PASS_AT_MOST), which keeps the look bounded.
local PASS_AT_MOST = 4
local passed_jobs, passed_orgs, npassed = {}, {}, 0

-- The organization first in fair order across the classes that fit (ties: by name), but for
-- the ones passed over.
local fitting, fit = {}, {}
for _, class in ipairs(redis.call('SMEMBERS', CLASSES)) do
  if fits(class) then
    fitting[#fitting + 1], fit[class] = class, true
  end
end
local function first_org()
  local org, org_score
  for _, class in ipairs(fitting) do
    local head = redis.call('ZRANGE', fairkey(class), '0', tostring(npassed), 'WITHSCORES')
    for i = 1, #head, 2 do
      if not passed_orgs[head[i]] then
        local sc = tonumber(head[i + 1])
        if not org or sc < org_score or (sc == org_score and head[i] < org) then
          org, org_score = head[i], sc
        end
        break
      end
    end
  end
  return org
end

-- pick is an org's best-ranked job among the heads of its classes that fit, but for the jobs
-- passed over: the job, its class, whether it is the last of that class, and whether a job was
-- passed over on the way.
local function pick(org, classes)
  local best, best_rank, best_class, best_last, skipped
  local mine = {}
  for _, class in ipairs(split_classes(classes)) do
    if fit[class] then
      mine[#mine + 1] = class
    end
  end
  if #mine == 1 and npassed == 0 then
    -- One class fits: its head, and whether anything stands behind it; no ranks needed.
    local head = redis.call('ZRANGE', classq(org, mine[1]), '0', '1')
    return head[1], mine[1], head[2] == nil, false
  end
  for _, class in ipairs(mine) do
    local head = redis.call('ZRANGE', classq(org, class), '0', tostring(npassed + 1), 'WITHSCORES')
    for i = 1, #head, 2 do
      if passed_jobs[head[i]] then
        skipped = true
      else
        if not best or tonumber(head[i + 1]) < best_rank then
          best, best_rank, best_class, best_last = head[i], tonumber(head[i + 1]), class, #head == 2
        end
        break
      end
    end
  end
  return best, best_class, best_last, skipped
end

-- What the agent's node holds (arg_held: cache needs, jobspec.CacheNeeds): a job whose model
-- the node holds starts without downloading it, one whose environments it holds without
-- installing them, one whose compile cache it holds without compiling. warmth weighs what of a
-- job's needs the node holds (a model's weights outweigh a compile cache, which outweighs an
-- environment), and whether it holds all of them but the compile cache (which only a run of
-- the organization's model on those GPUs leaves: a bonus, never a reason to look further).
local held, has_held = {}, arg_held ~= ''
for h in string.gmatch(arg_held, '%S+') do
  held[h] = true
end
note_holder(agent, arg_held, tonumber(arg_held_ttl))

-- Delay scheduling: a job whose model's weights this node lacks, but another node that claimed
-- lately holds, is left for such a node for as long as this node would take to download them
-- (its weights, F.weights, at arg_weights_rate bytes a millisecond), counted from the first
-- claim that left it (F.cold_since); then any node takes it. Waiting longer than the download
-- would gain the job nothing, and the node it waits for saves the download's GPU time. A node
-- that holds nothing says nothing of its cache (a first-fit claim) and never leaves a job.
local weights_rate = tonumber(arg_weights_rate) or 0
local function cold_until(id, needs, weights, cold_since)
  local need = string.match(needs or '', '(m:%S+)')
  local bytes = tonumber(weights) or 0
  if weights_rate <= 0 or bytes <= 0 or not need or held[need] then
    return nil
  end
  local since = tonumber(cold_since)
  if not since then
    if redis.call('ZCOUNT', holders(need), int(NOW - tonumber(arg_held_ttl)), '+inf') == 0 then
      return nil -- no node holds them: nothing to wait for
    end
    since = NOW
    redis.call('HSET', jobkey(id), F.cold_since, int(since))
  end
  local till = since + math.ceil(bytes / weights_rate)
  if NOW >= till then
    return nil
  end
  return till, need
end

local function warmth(needs)
  local w, all = 0, true
  for n in string.gmatch(needs or '', '%S+') do
    local kind = string.sub(n, 1, 2)
    if held[n] then
      w = w + (kind == 'm:' and 4 or kind == 'c:' and 2 or 1)
    elseif kind ~= 'c:' then
      all = false
    end
  end
  return w, all
end

-- The fair orders hold only orgs with room and ready jobs, but the limit that decides room may
-- have changed since an org was filed (the service's default is this call's), and an order
-- that named an org with nothing ready would be mended here: such an org is taken out and the
-- next one looked at, a few times at most. The job is read once (its fence, whether it avoids
-- this agent, what the answer needs) before anything is written.
--
-- Cache-aware placement: with a node that holds something, the first job it may take in fair
-- order is not taken at once unless the node holds all it needs; the claim looks at the first
-- jobs of the next organizations in fair order (then, when no other organization waits, the next
-- jobs of those looked at), at most PASS_AT_MOST (the bound of every pass), and takes the first
-- of those the node holds the most of, else that first job. A job passed over so is counted (F.cache_passed), and one passed over
-- PASS_AT_MOST times is taken when it comes first: nobody waits on other jobs' caches for long.
local org, o, best, best_class, best_last, j, skipped
local avoided_till, avoided_class
local cold_till, cold_class, cold_need
local chosen, chosen_w, fair_id, looked, cache_orgs = nil, -1, nil, {}, {}
for _ = 1, 4 + PASS_AT_MOST do
  org = first_org()
  if not org and next(cache_orgs) then
    -- No other organization waits: the next jobs of the ones looked at.
    for name in pairs(cache_orgs) do
      passed_orgs[name] = nil
    end
    cache_orgs = {}
    org = first_org()
  end
  if not org then
    break
  end
  o = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'queued', 'running_gpus', 'usage', 'weight',
    'classes', 'hooked', 'hold_anchor', 'held', 'month', 'month_ms', 'month_budget_ms')
  if not has_room(o[1], o[2], o[10]) then
    refile(org, o[7], false)
  else
    best, best_class, best_last, skipped = pick(org, o[7])
    if best then
      j = redis.call('HMGET', jobkey(best), F.fence, F.avoid, F.est_ms, F.needs, F.cache_passed, F.weights,
        F.cold_since, unpack(CLAIMED))
      local over = over_budget(j[3], o[11], o[12], o[13])
      local till, need
      if has_held and not over and not avoids(j[2], agent) then
        till, need = cold_until(best, j[4], j[6], j[7])
        if till and (not cold_till or till < cold_till) then
          cold_till, cold_class, cold_need = till, best_class, need
        end
      end
      if till then
        passed_orgs[org] = true -- left for a node that holds its weights: the next organization's first job
      elseif not over and not avoids(j[2], agent) then
        if not has_held then
          chosen = {org, o, best, best_class, best_last, j}
          break
        end
        local w, all = warmth(j[4])
        if w > chosen_w then
          chosen, chosen_w = {org, o, best, best_class, best_last, j}, w
        end
        if not fair_id then
          fair_id = best
          if all or not j[4] or (tonumber(j[5]) or 0) >= PASS_AT_MOST then
            break -- it needs nothing this node lacks, or nothing at all, or has waited enough
          end
        elseif all and w > 0 then
          break
        end
        looked[#looked + 1] = best
        -- The next look is at the next organization's first job: an organization's jobs
        -- behind its first mostly need what its first needs.
        passed_orgs[org], cache_orgs[org] = true, true
      elseif not over then
        local till = tonumber(string.match(j[2], '|(%d+)$'))
        if not avoided_till or till < avoided_till then
          avoided_till, avoided_class = till, best_class
        end
      end
      passed_jobs[best], npassed = true, npassed + 1
    elseif skipped then
      passed_orgs[org] = true -- nothing ready in it but jobs passed over
    else
      for _, class in ipairs(fitting) do
        redis.call('ZREM', fairkey(class), org) -- nothing of it ready in any class that fits
      end
    end
  end
  org, j = nil, nil
  if npassed >= PASS_AT_MOST then
    break
  end
end
local placed_note = ''
if chosen then
  org, o, best, best_class, best_last, j = unpack(chosen)
  if best ~= fair_id and fair_id then
    -- Placed for its cache: the jobs ahead of it that this claim looked at wait for another
    -- node, each counted.
    local ahead = 0
    for _, id in ipairs(looked) do
      if id == best then
        break
      end
      redis.call('HINCRBY', jobkey(id), F.cache_passed, 1)
      ahead = ahead + 1
    end
    local what = {}
    for n in string.gmatch(j[4] or '', '%S+') do
      if held[n] then
        what[#what + 1] = (string.sub(n, 1, 2) == 'c:' and 'the compile cache ' or '') .. string.sub(n, 3)
      end
    end
    placed_note = ' (placed for its cache: the node holds ' .. table.concat(what, ', ') .. '; ' .. ahead ..
      ' job(s) ahead of it in fair order passed over)'
  end
  local since = tonumber(j[7])
  if since then
    -- It waited for a node that holds its weights: say whether one came.
    local need = string.match(j[4] or '', '(m:%S+)')
    local waited = string.format('%.1f', (NOW - since) / 1000)
    if need and held[need] then
      placed_note = placed_note .. ' (placed for its cache: waited ' .. waited .. ' s for a node that holds ' ..
        string.sub(need, 3) .. ')'
    else
      placed_note = placed_note .. ' (waited ' .. waited .. ' s, as long as fetching its weights takes, for a node that holds them; none came)'
    end
    redis.call('HDEL', jobkey(best), F.cold_since)
  end
  for _ = 1, 4 do
    table.remove(j, 4) -- needs, cache_passed, weights, cold_since: not for the answer
  end
end

if org then
  local running = tonumber(o[1]) or 0
  local id, key = best, jobkey(best)
  redis.call('ZREM', classq(org, best_class), id)
  redis.call('HINCRBY', READY, best_class, -1)
  -- The org's counters, its prepaid usage and its ready classes, in one write.
  local classes = o[7]
  if best_last then
    classes = without_class(classes, best_class)
    redis.call('ZREM', fairkey(best_class), org)
  end
  local gpus = parse_class(best_class).count
  local usage = (tonumber(o[5]) or 0) + math.floor(gpus * quantum * decay_factor() + 0.5)
  local _, month = month_fields(o[11], o[12], gpus * quantum)
  redis.call('HSET', orgkey(org), 'queued', int((tonumber(o[3]) or 1) - 1), 'running', int(running + 1),
    'running_gpus', int((tonumber(o[4]) or 0) + gpus), 'usage', int(usage), 'classes', classes,
    'hold_anchor', int((tonumber(o[9]) or 0) + gpus * (NOW - USAGE_EPOCH)), unpack(month))
  if has_room(running + 1, o[2], o[10]) then
    rescore(org, classes, score(usage, o[6]))
  else
    refile(org, classes, false) -- at its limit: out of the fair orders until a job of its ends
  end
  local fence = (tonumber(j[1]) or 0) + 1
  local token = fence .. '.' .. arg_token_rand
  local exp = arg_lease_expires
  redis.call('HSET', key, F.status, 'PENDING', F.lease_token, token, F.lease_expires, exp, F.lease_filed, exp,
    F.agent_id, agent, F.updated_at, T, F.charged_until, arg_paid_until, F.fence, int(fence), F.held_since, T,
    F.log_bytes, '0')
  table.remove(j, 1)
  table.remove(j, 1)
  table.remove(j, 1)
  -- The answer shows the job as this claim left it.
  j[CLAIMED_AT.status], j[CLAIMED_AT.updated_at], j[CLAIMED_AT.agent_id] = 'PENDING', T, agent
  index_job(id, org, j[CLAIMED_AT.kind], 'PENDING')
  redis.call('ZADD', LEASES, exp, id)
  redis.call('ZADD', STORED_DUE, 'NX', T, id) -- its storage is measured from now on (storage.go)
  if arg_claim_id ~= '' then
    redis.call('SET', claimkey(arg_claim_id), id .. ' ' .. token .. ' ' .. agent, 'PX', arg_lease_ttl)
  end
  emit(id, org, 'job.pending', 'PENDING', agent .. placed_note, o[8])
  if arg_filed == '1' then
    unwait(arg_waiter)
  end
  j[CLAIMED_AT.id] = id
  if SPLIT then
    return {token, j} -- the config and secrets are in the job's own slot: the caller reads them
  end
  local big = redis.call('MGET', owncfg(id), ownsec(id))
  if not big[1] then
    big = redis.call('MGET', oldcfgkey(id), oldseckey(id)) -- a store the reaper has not migrated yet
  end
  return {token, j, big[1], big[2]}
end
-- Only jobs that avoid this agent were ready: it waits like any claim (a job queued meanwhile
-- wakes it), and looks again when the first avoid window ends. The wake-up that brought it here
-- may have been meant for such a job, so it is passed on to another waiter that could take it.
-- Likewise when the jobs ready were left for nodes that hold their weights: it looks again when
-- the first such wait ends, and the wake-up goes on only to a waiting node that holds them.
if avoided_till or cold_till then
  saw_agent(agent, arg_free)
  if arg_filed == '1' then
    unwait(arg_waiter) -- not woken by its own pass
  end
  if avoided_till then
    wake(avoided_class, 1)
  end
  if cold_till then
    wake(cold_class, 1, cold_need, true)
  end
  if arg_waiter ~= '' then
    wait_for_work(arg_waiter, arg_wait_until, arg_held)
  end
  return {'', math.min(avoided_till or cold_till, cold_till or avoided_till)}
end
-- Nothing fits: this agent waits with these GPUs free, which is what queue_reason needs, and
-- the claim waits to be woken for a job it could take.
saw_agent(agent, arg_free)
if arg_waiter ~= '' then
  wait_for_work(arg_waiter, arg_wait_until, arg_held)
end
local next_ready = redis.call('ZRANGE', DELAYED, '0', '0', 'WITHSCORES')
return {'', tonumber(next_ready[2]) or 0}
