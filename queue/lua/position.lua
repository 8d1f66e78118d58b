-- position says where a queued job stands: how many jobs would be offered a node before it,
-- and why it waits. Read-only.
-- For a job not yet submitted (a preview), pass no id and the org, class and priority it would
-- have.
-- KEYS[1] the job's hash, or any key with the tag (routes the call)
-- ARGV[4] job id or ""  ARGV[5] org  ARGV[6] GPU class  ARGV[7] priority
-- ARGV[8] default running limit (0: none)  ARGV[9] how recent an agent's report of free GPUs
-- must be to count (ms)
-- Returns {runs_ahead, reason, a, b}: reason "backoff" (a = ready time), "org_limit"
-- (a = running, b = limit), "gpus" (a = GPUs, b = model), "turn", or "" if not queued.
local j = {'QUEUED', ARGV[5], ARGV[6], int((100 - tonumber(ARGV[7])) * RANK_BASE + NOW), false}
if ARGV[4] ~= '' then
  j = redis.call('HMGET', jobkey(ARGV[4]), 'status', 'org', 'class', 'rank', 'ready_at')
  if j[1] ~= 'QUEUED' then
    return {-1, ''}
  end
end
local org, class, rank = j[2], j[3], j[4]
-- A job not yet submitted goes behind every queued job of its rank (one submitted in the same
-- millisecond with the same priority was there first); a queued one behind those ranked lower.
local upto = '(' .. rank
if ARGV[4] == '' then
  upto = rank
end
local ahead = 0
for _, c in ipairs(split_classes(redis.call('HGET', orgkey(org), 'classes'))) do
  ahead = ahead + redis.call('ZCOUNT', classq(org, c), '-inf', upto)
end
local mine = redis.call('ZSCORE', FAIR, org) or fair_score(org)
for _, other in ipairs(redis.call('ZRANGEBYSCORE', FAIR, '-inf', '(' .. mine)) do
  ahead = ahead + (tonumber(redis.call('HGET', orgkey(other), 'queued')) or 0)
end
if j[5] then
  return {ahead, 'backoff', j[5], 0}
end
local o = redis.call('HMGET', orgkey(org), 'running', 'max_running')
local limit = tonumber(o[2]) or tonumber(ARGV[8])
if limit > 0 and (tonumber(o[1]) or 0) >= limit then
  return {ahead, 'org_limit', tonumber(o[1]) or 0, limit}
end
local c = parse_class(class)
local model, count = c.model, c.count
if count > 0 then
  local fresh = NOW - tonumber(ARGV[9])
  local found = false
  local reports = redis.call('HGETALL', AGENTS)
  for i = 2, #reports, 2 do
    local free, at = string.match(reports[i], '^(.*)|(%d+)$')
    if tonumber(at) >= fresh then
      for m, n in string.gmatch(free, '([^:,]+):(%d+)') do
        if string.upper(m) == string.upper(model) and tonumber(n) >= count then
          found = true
        end
      end
    end
  end
  if not found then
    return {ahead, 'gpus', count, model}
  end
end
return {ahead, 'turn', 0, 0}
