-- One page of a filtered list, newest first. One filter: a range of its index. Several: the smallest
-- index is walked newest first and each id is kept when every other index has it (ZSCORE), until the
-- page is full; the count is ZINTERCARD (no intersection is written). The cost follows the page (and,
-- for combined filters, how rare a match is in the smallest index), never the number of records.
--
-- KEYS[1]    the first filter's index, zset id -> created_at (keys.INDEX, state_index_key,
--            outcome_index_key, node_index_key or stage_key); every index has the same scores
-- KEYS[2..n] the other filters' indexes (n = #KEYS - 1)
-- KEYS[n+1]  scratch zset (keys.INDEX_TMP): the count on a Redis without ZINTERCARD (< 7.0), deleted at once
-- ARGV[1]    offset (rank from the newest among the matches)
-- ARGV[2]    limit
-- Returns {total, {id, ...}}.
local n = #KEYS - 1
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if n == 1 then
  return {redis.call('ZCARD', KEYS[1]), redis.call('ZREVRANGE', KEYS[1], offset, offset + limit - 1)}
end
local small, size = 1, redis.call('ZCARD', KEYS[1])
for i = 2, n do
  local c = redis.call('ZCARD', KEYS[i])
  if c < size then small, size = i, c end
end
local ok, total = pcall(redis.call, 'ZINTERCARD', n, unpack(KEYS, 1, n))
if not ok then
  redis.call('ZINTERSTORE', KEYS[n + 1], n, unpack(KEYS, 1, n))
  total = redis.call('ZCARD', KEYS[n + 1])
  redis.call('DEL', KEYS[n + 1])
end
local page, matched, pos, chunk = {}, 0, 0, 256
while #page < limit and matched < total and pos < size do
  local ids = redis.call('ZREVRANGE', KEYS[small], pos, pos + chunk - 1)
  for _, id in ipairs(ids) do
    local all = true
    for i = 1, n do
      if i ~= small and not redis.call('ZSCORE', KEYS[i], id) then all = false break end
    end
    if all then
      matched = matched + 1
      if matched > offset then
        page[#page + 1] = id
        if #page >= limit then break end
      end
    end
  end
  pos = pos + chunk
end
return {total, page}
