-- adapter_put files the adapter of a job's committed checkpoint step — what a deployment
-- serves — once: a later put of the same step answers the first one's id. An organization
-- holds at most arg_max adapters (LIMIT_ADAPTERS <n>).
-- Returns {id, 1 if it was filed now}.
local of = adapterof(arg_job, arg_step)
local have = redis.call('GET', of)
if have and redis.call('EXISTS', adapterkey(have)) == 1 then
  return {have, 0}
end
local n = redis.call('ZCARD', orgadapters(arg_org))
if n >= tonumber(arg_max) then
  return redis.error_reply('LIMIT_ADAPTERS ' .. n)
end
redis.call('SET', of, arg_id)
redis.call('HSET', adapterkey(arg_id), A.id, arg_id, A.org, arg_org, A.job, arg_job, A.step, arg_step,
  A.base, arg_base, A.kind, arg_kind, A.name, arg_name, A.status, 'READY', A.deployment, 'NOT_DEPLOYED',
  A.created_at, T, A.updated_at, T)
redis.call('ZADD', orgadapters(arg_org), T, arg_id)
return {arg_id, 1}
