-- unwait takes back a waiting claim that stopped waiting (its wait ended, or its caller went
-- away) before a job woke it.
-- KEYS[1] the waiting index (routes the call)
-- Returns OK.
unwait(arg_waiter)
return redis.status_reply('OK')
