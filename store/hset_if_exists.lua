-- Set fields of a hash that exists; never creates the hash (e.g. a flag on a deleted experiment).
--
-- KEYS[1]  the hash   (e.g. keys.exp_key)
-- ARGV     field, value, field, value, ... (at least one pair)
-- Returns 1 when set, 0 when the hash does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
