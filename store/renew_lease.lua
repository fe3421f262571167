-- Extend the owner's lease on an experiment, only while it is still the owner.
--
-- KEYS[1]  experiment hash   (keys.exp_key)
-- ARGV[1]  owner
-- ARGV[2]  lease length in seconds (from Redis' clock)
-- Returns 1 when renewed, 0 when someone else owns it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('HSET', KEYS[1], 'lease_until', tostring(now + tonumber(ARGV[2])))
return 1
