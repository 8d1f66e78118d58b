-- position says where a queued job stands: about how many jobs will be offered a node before
-- it, and why it waits. Read-only, and O(log n) whatever the number of jobs, organizations or
-- agents: its org's own jobs ranked ahead of it in every class (one count per class the org
-- has ready), plus, for each organization ahead of its org in its class's fair order (one
-- count), as many turns as its own org needs (each gets about one job per turn of its org),
-- but no more than the jobs the others have ready in the class (a counter).
-- For a job not yet submitted (a preview), pass no id and the org, class and priority it would
-- have.
-- KEYS[1] the job's hash, or any key with the tag (routes the call)
-- arg_id job id or ""; arg_fresh_ms how recent an agent's wait must be to count.
-- Returns {runs_ahead, reason, a, b}: reason "backoff" (a = ready time), "org_budget" (the
-- org's monthly budget is spent: a = GPU-ms spent this month, b = the budget), "org_limit"
-- (a = running, b = limit), "over_budget" (the job's estimate, a GPU-ms, is more than the b left
-- of its org's monthly budget), "gpus" (a = GPUs, b = model), "turn", or "" if not queued.
local j = {'QUEUED', arg_org, arg_class, int((100 - tonumber(arg_priority)) * RANK_BASE + NOW), false}
if arg_id ~= '' then
  j = redis.call('HMGET', jobkey(arg_id), F.status, F.org, F.class, F.rank, F.ready_at, F.est_ms)
  if j[1] ~= 'QUEUED' then
    return {-1, ''}
  end
end
local org, class, rank = j[2], j[3], j[4]
-- A job not yet submitted goes behind every queued job of its rank (one submitted in the same
-- millisecond with the same priority was there first); a queued one behind those ranked lower.
local upto = '(' .. rank
if arg_id == '' then
  upto = rank
end
local o = redis.call('HMGET', orgkey(org), 'running', 'max_running', 'classes', 'usage', 'weight', 'held', 'month_ms',
  'month_budget_ms', 'month')
local own = 0
for _, c in ipairs(split_classes(o[3])) do
  own = own + redis.call('ZCOUNT', classq(org, c), '-inf', upto)
end
local mine = score(o[4], o[5])
local orgs_ahead = redis.call('ZCOUNT', fairkey(class), '-inf', '(' .. mine)
local others = (tonumber(redis.call('HGET', READY, class)) or 0) - redis.call('ZCARD', classq(org, class))
local ahead = own + math.max(0, math.min(orgs_ahead * (own + 1), others))
if j[5] then
  return {ahead, 'backoff', j[5], 0}
end
if o[6] == '1' then
  return {ahead, 'org_budget', tonumber(o[7]) or 0, tonumber(o[8]) or 0}
end
local over, left = over_budget(j[6], o[9], o[7], o[8])
if over then
  return {ahead, 'over_budget', tonumber(j[6]), left}
end
local limit = tonumber(o[2]) or DEF_RUNNING
if limit > 0 and (tonumber(o[1]) or 0) >= limit then
  return {ahead, 'org_limit', tonumber(o[1]) or 0, limit}
end
local c = parse_class(class)
if c.count > 0 then
  -- Any agent that waited recently with that many of the model free: the few with the fewest
  -- that are enough, checked for how recently they waited.
  local fresh = NOW - tonumber(arg_fresh_ms)
  local found = false
  local near = redis.call('ZRANGEBYSCORE', agentfree(c.model), c.count, '+inf', 'LIMIT', '0', '8')
  if #near > 0 then
    for _, seen in ipairs(redis.call('ZMSCORE', AGENTS_SEEN, unpack(near))) do
      if seen and tonumber(seen) >= fresh then
        found = true
      end
    end
  end
  if not found then
    return {ahead, 'gpus', c.count, c.model} -- a reply's tag, not a job field
  end
end
return {ahead, 'turn', 0, 0}
