-- prelude.lua is prepended to every script. Keys of a job are derived from the prefix
-- (ARGV or KEYS carry it) so that a script can reach the job it picked; every key shares the
-- prefix's hash tag.

-- Event types that also go to the webhook outbox; the rest stay in the job's own stream.
local OUTBOX_TYPES = {
  ['job.queued'] = true, ['job.started'] = true, ['job.checkpoint'] = true,
  ['job.completed'] = true, ['job.failed'] = true, ['job.stopped'] = true,
  ['job.retrying'] = true,
}
local OUTBOX_MAXLEN = 1000000

-- emit appends one event to the job's stream (and the outbox), numbered per job from 1.
local function emit(jobkey, evkey, outbox, id, org, typ, status, now, detail)
  local seq = redis.call('HINCRBY', jobkey, 'event_seq', 1)
  redis.call('XADD', evkey, '*', 'seq', seq, 'type', typ, 'status', status, 'time', now, 'detail', detail)
  if OUTBOX_TYPES[typ] then
    redis.call('XADD', outbox, 'MAXLEN', '~', OUTBOX_MAXLEN, '*',
      'job_id', id, 'org', org, 'seq', seq, 'type', typ, 'status', status, 'time', now, 'detail', detail)
  end
  return seq
end

local function is_live(status)
  return status == 'PENDING' or status == 'RUNNING'
end
