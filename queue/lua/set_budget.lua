-- set_budget sets the GPU time (GPU-milliseconds) a job may use over all its runs, or at 0
-- clears it, where its record is: its live hash or, for a job that ended, its own (the caller
-- names it). A record that is gone meanwhile (archived, or moved to its own slot) is not
-- brought back as a stray hash.
-- KEYS[1] the job's record (routes the call; the one key touched)
-- Returns 1, or 0 when there is no record.
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return 0 end
if arg_budget_ms == '0' then
  redis.call('HDEL', k, F.budget_ms, F.budget_seen)
else
  redis.call('HSET', k, F.budget_ms, arg_budget_ms, F.budget_seen, arg_seen)
end
return 1
