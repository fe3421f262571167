-- Queue the notice that an experiment finished, once, in the MULTI of its finishing transition: the
-- outbox (store/cluster/outbox.py) holds it until a node's deliverer has handled it (webhook, stage check), so a
-- worker that dies right after the transition loses nothing.
--
-- KEYS[1] the experiment's record (hash)            (keys.exp_key)
-- KEYS[2] the outbox: task id -> when it is due     (keys.OUTBOX)
-- KEYS[3] the outbox's tasks: task id -> JSON       (keys.OUTBOX_TASKS)
-- ARGV[1] the task id
-- ARGV[2] now (epoch seconds): when it is due
-- ARGV[3] the task JSON
-- Returns 1 when queued; 0 when the record is not finished or its notice was queued already.
if redis.call('HGET', KEYS[1], 'state') ~= 'finished' then return 0 end
if redis.call('HSETNX', KEYS[1], 'finish_notified', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
