-- A driver gives its run back (its process is stopping, or it failed): lease ended now and its
-- identity cleared, so the node's supervisor re-adopts the run at its next scan, only while the
-- caller is still the owner.
--
-- KEYS[1]  experiment hash   (keys.exp_key)
-- ARGV[1]  owner
-- Returns 1 when handed back, 0 when someone else owns it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', '0')
redis.call('HDEL', KEYS[1], 'driver_pid', 'driver_started', 'driver_pidns')
return 1
