-- Delete a string key only if it still holds the expected value (give back a claim that is ours).
--
-- KEYS[1]  the key   (e.g. keys.idempotency_key)
-- ARGV[1]  expected value
-- Returns 1 when deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
