-- A purpose search over a bounded window of a list: the `window` newest candidates from rank `from`
-- (one index zset, or the intersection of several, as list_page.lua), each record's purpose checked for
-- the text (ASCII letters case-folded; a plain substring, no patterns). The caller shows the result as
-- partial and offers the next window (`from` = the rank returned) while candidates remain.
--
-- KEYS[1]    the first filter's index, zset id -> created_at (keys.INDEX, state_index_key,
--            outcome_index_key, node_index_key or stage_key): the order of the result is its
-- KEYS[2..n]  the other filters' indexes (n = #KEYS - 1)
-- KEYS[n+1]  scratch zset (keys.INDEX_TMP), deleted before the script returns
-- ARGV[1]    the text looked for, lower-cased
-- ARGV[2]    from: rank (newest first) the window starts at
-- ARGV[3]    window: candidates read at most
-- ARGV[4]    an experiment's record key is ARGV[4] .. id (keys.exp_key(""))
-- Returns {candidates in all, rank after the window, {matching id, ...} (newest first)}.
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
local from = tonumber(ARGV[2])
local ids = redis.call('ZREVRANGE', src, from, from + tonumber(ARGV[3]) - 1)
local total = redis.call('ZCARD', src)
if n > 1 then redis.call('DEL', src) end
local needle = string.lower(ARGV[1])
local found = {}
for _, id in ipairs(ids) do
  local purpose = redis.call('HGET', ARGV[4] .. id, 'purpose')
  if purpose and string.find(string.lower(purpose), needle, 1, true) then found[#found + 1] = id end
end
return {total, from + #ids, found}
