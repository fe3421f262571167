-- Take GPU indices on one node for one experiment; idempotent (what it already holds counts).
--
-- KEYS[1]  the node's GPU hash: index -> experiment id   (keys.gpu_key)
-- ARGV[1]  experiment id
-- ARGV[2]  number of GPUs wanted
-- ARGV[3]  number of GPUs on the node
-- Returns the indices held, or false (nothing taken) when too few are free.
local total = tonumber(ARGV[3])
local want = tonumber(ARGV[2])
local mine = {}
for i = 0, total - 1 do
  local owner = redis.call('HGET', KEYS[1], tostring(i))
  if owner == ARGV[1] then mine[#mine + 1] = i end
end
if #mine >= want then return mine end
local free = {}
for i = 0, total - 1 do
  if not redis.call('HGET', KEYS[1], tostring(i)) then free[#free + 1] = i end
end
if #free < want then return false end
local got = {}
for i = 1, want do
  redis.call('HSET', KEYS[1], tostring(free[i]), ARGV[1])
  got[#got + 1] = free[i]
end
return got
