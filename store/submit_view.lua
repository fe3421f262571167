-- What a submission checks, read in one round trip: every registered node's heartbeat hash and
-- drain record (for the placement checks), and the experiment that holds the result dir, with its state.
--
-- KEYS[1] set of node names                 (keys.NODES)
-- KEYS[2] result dir -> experiment id hash  (keys.RESULT_DIRS)
-- ARGV[1] the result dir (a real path)
-- ARGV[2] a node's hash key is ARGV[2] .. name (keys.node_key("")); its drain key adds ARGV[3] (keys.drain_key)
-- ARGV[3] the drain key's suffix
-- ARGV[4] an experiment's hash key is ARGV[4] .. id (keys.exp_key(""))
-- Returns {holder id or nil, its state or nil, name, {field, value, ...}, drain or nil, name, ...}.
local holder = redis.call('HGET', KEYS[2], ARGV[1])
local state = false
if holder then state = redis.call('HGET', ARGV[4] .. holder, 'state') end
local out = {holder, state}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGETALL', ARGV[2] .. name)
  out[#out + 1] = redis.call('GET', ARGV[2] .. name .. ARGV[3])
end
return out
