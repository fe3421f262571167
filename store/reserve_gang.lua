-- A multi-node run's GPUs on several nodes at once: all or nothing, never a partial hold (two gangs
-- can never each hold half and wait for each other). Idempotent: an existing gang is returned as it is.
--
-- KEYS[1]   the gang hash                                  (keys.gang_key)
-- KEYS[2..] the GPU hashes of the head node, then of each candidate node   (keys.gpu_key)
-- ARGV[1]   experiment id
-- ARGV[2]   GPUs per node
-- ARGV[3]   nodes wanted (the head included)
-- ARGV[4..] for each KEYS[i+1]: node name, then its GPU total (0 = GPUs not managed there)
-- Returns {nodes json, gpus json}, or false (nothing taken) when the head or too few others fit now.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {redis.call('HGET', KEYS[1], 'nodes'), redis.call('HGET', KEYS[1], 'gpus')}
end
local per_node = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local chosen = {}
for i = 2, #KEYS do
  local name = ARGV[2 + 2 * (i - 1)]
  local total = tonumber(ARGV[3 + 2 * (i - 1)])
  local free = {}
  for g = 0, total - 1 do
    if #free < per_node and not redis.call('HGET', KEYS[i], tostring(g)) then free[#free + 1] = g end
  end
  if total == 0 or #free >= per_node then  -- a node that manages no GPUs holds nothing but its place
    chosen[#chosen + 1] = {i, name, free}
  elseif i == 2 then
    return false
  end
  if #chosen == wanted then break end
end
if #chosen < wanted then return false end
local nodes = {}
local gpus = {}
for _, c in ipairs(chosen) do
  for _, g in ipairs(c[3]) do redis.call('HSET', KEYS[c[1]], tostring(g), ARGV[1]) end
  nodes[#nodes + 1] = c[2]
  gpus[c[2]] = c[3]
end
local nodes_json = cjson.encode(nodes)
local gpus_json = cjson.encode(gpus)
redis.call('HSET', KEYS[1], 'nodes', nodes_json, 'gpus', gpus_json, 'per_node', ARGV[2], 'id', ARGV[1])
return {nodes_json, gpus_json}
