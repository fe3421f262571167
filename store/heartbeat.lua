-- A node's heartbeat in one round trip: listed, its record written and kept, and its drain read.
--
-- KEYS[1]  the set of node names   (keys.NODES)
-- KEYS[2]  the node's record hash  (keys.node_key)
-- KEYS[3]  the node's drain key    (keys.drain_key)
-- ARGV[1]  node name
-- ARGV[2]  record TTL, seconds
-- ARGV[3]  "1": also write the field `draining` (JSON true/false) from the drain key; "0": do not
-- ARGV[4..] field, value pairs (JSON-encoded values; `last_seen` among them)
-- Returns 1 when the node is drained, else 0.
local drained = redis.call('EXISTS', KEYS[3])
redis.call('SADD', KEYS[1], ARGV[1])
local fields = {}
for i = 4, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
if ARGV[3] == '1' then
  fields[#fields + 1] = 'draining'
  fields[#fields + 1] = (drained == 1) and 'true' or 'false'
end
if #fields > 0 then
  redis.call('HSET', KEYS[2], unpack(fields))
end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return drained
