-- A purpose search over a bounded window of a filtered list: at most ARGV[3] ids of the smallest filter
-- index, newest first, created before the cursor ARGV[2]; of those every other index has (the candidates),
-- the ones whose purpose contains the text (ASCII letters case-folded, a plain substring) are returned.
-- The caller shows the result as partial and offers the next window (the cursor returned) while ids remain.
--
-- KEYS[1]    the first filter's index, zset id -> created_at (keys.INDEX, state_index_key,
--            outcome_index_key, node_index_key or stage_key); every index has the same scores
-- KEYS[2..n] the other filters' indexes (n = #KEYS - 2)
-- KEYS[n+1]  scratch zset (keys.INDEX_TMP): the count on a Redis without ZINTERCARD (< 7.0), deleted at once
-- KEYS[n+2]  id -> purpose, lower-cased (keys.PURPOSES): one HMGET for the window (the record's own field
--            for an id it lacks)
-- ARGV[1]    the text looked for
-- ARGV[2]    cursor: only ids whose created_at is below this score ("" = from the newest)
-- ARGV[3]    window: ids of the smallest index read at most
-- ARGV[4]    an experiment's record key is ARGV[4] .. id (keys.exp_key(""))
-- Returns {candidates in all, candidates searched, next cursor or false (none older), {matching id, ...}}.
local n = #KEYS - 2
local small, size = 1, redis.call('ZCARD', KEYS[1])
for i = 2, n do
  local c = redis.call('ZCARD', KEYS[i])
  if c < size then small, size = i, c end
end
local total = size
if n > 1 then
  local ok, count = pcall(redis.call, 'ZINTERCARD', n, unpack(KEYS, 1, n))
  if not ok then
    redis.call('ZINTERSTORE', KEYS[n + 1], n, unpack(KEYS, 1, n))
    count = redis.call('ZCARD', KEYS[n + 1])
    redis.call('DEL', KEYS[n + 1])
  end
  total = count
end
local top = '+inf'
if ARGV[2] ~= '' then top = '(' .. ARGV[2] end
local window = tonumber(ARGV[3])
local got = redis.call('ZREVRANGEBYSCORE', KEYS[small], top, '-inf', 'LIMIT', 0, window)
local needle = string.lower(ARGV[1])
local candidates, searched, last = got, 0, false
if #got > 0 then last = redis.call('ZSCORE', KEYS[small], got[#got]) end
if n > 1 then
  candidates = {}
  for _, id in ipairs(got) do
    local all = true
    for i = 1, n do
      if i ~= small and not redis.call('ZSCORE', KEYS[i], id) then all = false break end
    end
    if all then candidates[#candidates + 1] = id end
  end
end
searched = #candidates
local found = {}
for first = 1, searched, 1000 do  -- HMGET in slices: unpack has a limit
  local last_k = math.min(first + 999, searched)
  local purposes = redis.call('HMGET', KEYS[n + 2], unpack(candidates, first, last_k))
  for k = first, last_k do
    local id = candidates[k]
    local purpose = purposes[k - first + 1]
    if not purpose then
      purpose = redis.call('HGET', ARGV[4] .. id, 'purpose')
      if purpose then purpose = string.lower(purpose) end
    end
    if purpose and string.find(purpose, needle, 1, true) then found[#found + 1] = id end
  end
end
local nxt = false
if #got >= window and #redis.call('ZREVRANGEBYSCORE', KEYS[small], '(' .. last, '-inf', 'LIMIT', 0, 1) > 0 then
  nxt = last
end
return {total, searched, nxt, found}
