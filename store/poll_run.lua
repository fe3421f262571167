-- A driver's periodic look at its experiment, in one round trip: is it still ours, was a stop
-- requested, and (when due) the lease extended.
--
-- KEYS[1]  experiment hash   (keys.exp_key)
-- ARGV[1]  owner
-- ARGV[2]  lease length in seconds from Redis' clock ("" or "0" = do not renew now)
-- Returns {owned (1/0), cancel requested (1/0)}.
local vals = redis.call('HMGET', KEYS[1], 'owner', 'cancel_requested')
local owned = (vals[1] == ARGV[1]) and 1 or 0
local cancel = (vals[2] == '1') and 1 or 0
local seconds = tonumber(ARGV[2]) or 0
if owned == 1 and seconds > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
  redis.call('HSET', KEYS[1], 'lease_until', tostring(now + seconds))
end
return {owned, cancel}
