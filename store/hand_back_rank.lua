-- A rank job gives its rank back (its process is stopping, or it failed): lease ended and the
-- last-enqueued time cleared, so the member node's supervisor enqueues a new rank job at its next
-- scan instead of waiting out the lease, only while the caller still holds the rank.
--
-- KEYS[1]  the gang hash   (keys.gang_key)
-- ARGV[1]  rank
-- ARGV[2]  owner (the rank job)
-- Returns 1 when handed back, 0 when another job holds the rank (or the gang is gone).
local r = 'r' .. ARGV[1]
if redis.call('HGET', KEYS[1], r .. ':owner') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], r .. ':lease', '0', r .. ':enq', '0')
return 1
