-- A rank job gives its rank back (its process is stopping, or it failed): lease ended now (the server's
-- time, not 0: the head's member grace counts from the hand-back, so a rank whose command runs on is not
-- called gone while the next worker starts) and the last-enqueued time cleared, so the member node's
-- supervisor enqueues a new rank job at its next scan instead of waiting out the lease, only while the
-- caller still holds the rank.
--
-- KEYS[1]  the gang hash   (keys.gang_key)
-- ARGV[1]  rank
-- ARGV[2]  owner (the rank job)
-- Returns 1 when handed back, 0 when another job holds the rank (or the gang is gone).
local r = 'r' .. ARGV[1]
if redis.call('HGET', KEYS[1], r .. ':owner') ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], r .. ':lease', string.format('%d.%06d', t[1], t[2]), r .. ':enq', '0')
return 1
