-- Delete one field of a hash only if it still holds the expected value (e.g. give back a swarm port).
--
-- KEYS[1]  the hash   (e.g. keys.swarm_port_key)
-- ARGV[1]  field
-- ARGV[2]  expected value (the holder)
-- Returns 1 when deleted, 0 otherwise.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
