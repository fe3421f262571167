-- Free every GPU a gang holds, on all its nodes, at once; the gang record expires later (for the report).
--
-- KEYS[1]   the gang hash                      (keys.gang_key)
-- KEYS[2..] the GPU hashes of its nodes        (keys.gpu_key)
-- ARGV[1]   experiment id
-- ARGV[2]   seconds the released gang record is kept
-- Returns, per node, the JSON list of GPU indices freed there.
local freed = {}
for i = 2, #KEYS do
  local held = redis.call('HGETALL', KEYS[i])
  local mine = {}
  for j = 1, #held, 2 do
    if held[j + 1] == ARGV[1] then mine[#mine + 1] = held[j] end
  end
  if #mine > 0 then redis.call('HDEL', KEYS[i], unpack(mine)) end
  freed[#freed + 1] = cjson.encode(mine)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'released', '1')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return freed
