-- One page of a filtered list, newest first: one index zset, or the intersection of several (written to a
-- scratch key and deleted in this script), so the cost follows the smallest index and the page, never the
-- number of records.
--
-- KEYS[1]    the first filter's index, zset id -> created_at (keys.INDEX, state_index_key,
--            outcome_index_key, node_index_key or stage_key): the order of the result is its
-- KEYS[2..n]  the other filters' indexes (n = #KEYS - 1)
-- KEYS[n+1]  scratch zset (keys.INDEX_TMP), deleted before the script returns
-- ARGV[1]    offset (rank from the newest)
-- ARGV[2]    limit
-- Returns {total, {id, ...}}.
local n = #KEYS - 1
local src = KEYS[1]
if n > 1 then
  local args = {KEYS[n + 1], n}
  for i = 1, n do args[#args + 1] = KEYS[i] end
  args[#args + 1] = 'WEIGHTS'
  for i = 1, n do args[#args + 1] = (i == 1) and 1 or 0 end
  redis.call('ZINTERSTORE', unpack(args))
  src = KEYS[n + 1]
end
local offset = tonumber(ARGV[1])
local page = redis.call('ZREVRANGE', src, offset, offset + tonumber(ARGV[2]) - 1)
local total = redis.call('ZCARD', src)
if n > 1 then redis.call('DEL', src) end
return {total, page}
