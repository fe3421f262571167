-- Take (or keep) one rank of a gang for one rank job: only when nobody else holds it with a live lease.
--
-- KEYS[1]  the gang hash                       (keys.gang_key)
-- ARGV[1]  rank
-- ARGV[2]  owner (the rank job)
-- ARGV[3]  lease seconds
-- ARGV[4]  the owner's node: the rank must still be placed there (a lost node's rank may have moved)
-- Returns 1 when the rank is the owner's now, 0 otherwise (or when the gang does not exist).
local nodes = redis.call('HGET', KEYS[1], 'nodes')
if not nodes then return 0 end
if cjson.decode(nodes)[tonumber(ARGV[1]) + 1] ~= ARGV[4] then return 0 end
local r = 'r' .. ARGV[1]
local owner = redis.call('HGET', KEYS[1], r .. ':owner')
local lease = tonumber(redis.call('HGET', KEYS[1], r .. ':lease') or '0') or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
if owner and owner ~= '' and owner ~= ARGV[2] and lease > now then return 0 end
redis.call('HSET', KEYS[1], r .. ':owner', ARGV[2], r .. ':lease', tostring(now + tonumber(ARGV[3])))
return 1
