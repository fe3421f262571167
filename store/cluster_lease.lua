-- Take or renew a cluster-wide lease (one holder at a time; it lapses when its holder stops renewing).
--
-- KEYS[1]  the lease key   (keys.lease_key)
-- ARGV[1]  holder id
-- ARGV[2]  lease length in milliseconds
-- Returns 1 when the caller holds the lease now (taken or renewed), 0 when another holder has it.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
