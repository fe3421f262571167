-- Move a gang's ranks off nodes that are gone, all or nothing: each lost node's rank goes to a candidate
-- with `per_node` free GPUs (the lost node's GPUs held by the gang are freed), and that rank's state,
-- owner, lease and enqueue time are reset so a rank job on the new node starts it afresh.
--
-- KEYS[1]           the gang hash                                     (keys.gang_key)
-- KEYS[2..1+L]      the GPU hashes of the L lost nodes                (keys.gpu_key)
-- KEYS[2+L..]       the GPU hashes of the candidate nodes, in order   (keys.gpu_key)
-- ARGV[1]           experiment id
-- ARGV[2]           L, the number of lost nodes
-- ARGV[3..2+L]      the lost nodes' names
-- ARGV[3+L..]       for each candidate: node name, then its GPU total (0 = GPUs not managed there)
-- Returns 1 when every lost rank moved, 0 (nothing changed) otherwise.
local raw = redis.call('HGET', KEYS[1], 'nodes')
if not raw then return 0 end
local nodes = cjson.decode(raw)
local gpus = cjson.decode(redis.call('HGET', KEYS[1], 'gpus'))
local per_node = tonumber(redis.call('HGET', KEYS[1], 'per_node'))
local lost = tonumber(ARGV[2])
local picks = {}
local c = 0
for i = 1, lost do
  local found = nil
  while not found do
    c = c + 1
    local key = KEYS[1 + lost + c]
    if not key then return 0 end
    local name = ARGV[2 + lost + 2 * c - 1]
    local total = tonumber(ARGV[2 + lost + 2 * c])
    local free = {}
    for g = 0, total - 1 do
      if #free < per_node and not redis.call('HGET', key, tostring(g)) then free[#free + 1] = g end
    end
    if total == 0 or #free >= per_node then found = {key, name, free} end
  end
  picks[i] = found
end
for i = 1, lost do
  local old = ARGV[2 + i]
  local held = redis.call('HGETALL', KEYS[1 + i])
  for j = 1, #held, 2 do
    if held[j + 1] == ARGV[1] then redis.call('HDEL', KEYS[1 + i], held[j]) end
  end
  local pick = picks[i]
  for _, g in ipairs(pick[3]) do redis.call('HSET', pick[1], tostring(g), ARGV[1]) end
  for rank = 1, #nodes do
    if nodes[rank] == old then
      nodes[rank] = pick[2]
      local r = 'r' .. tostring(rank - 1)
      redis.call('HDEL', KEYS[1], r, r .. ':owner', r .. ':lease', r .. ':enq')
    end
  end
  gpus[old] = nil
  gpus[pick[2]] = pick[3]
end
redis.call('HSET', KEYS[1], 'nodes', cjson.encode(nodes), 'gpus', cjson.encode(gpus))
return 1
