-- The upgrade's backfill, one batch of ids at a time: each record's index entries as transition.lua
-- would keep them now (read from the record in this script, so a transition running meanwhile is never
-- undone); an id whose record is gone leaves the indexes that do not need its fields.
--
-- KEYS[1]  every id, zset id -> created_at (keys.INDEX)
-- KEYS[2]  set of unfinished ids           (keys.UNFINISHED)
-- KEYS[3]  expiry schedule                 (keys.EXPIRING)
-- KEYS[4]  id -> "<node>\n<stage>"          (keys.EXPIRING_WHERE)
-- KEYS[5]  id -> purpose, lower-cased      (keys.PURPOSES)
-- KEYS[6..] the per-state indexes in ARGV[1]'s order, then the per-outcome ones in ARGV[2]'s
-- ARGV[1]  state names, comma-separated
-- ARGV[2]  outcome names, comma-separated
-- ARGV[3]  an experiment's record key is ARGV[3] .. id (keys.exp_key(""))
-- ARGV[4]  a node's keys start with ARGV[4] .. node: its index adds ARGV[5], its active set ARGV[6]
-- ARGV[5]  the node index key's suffix (keys.node_index_key)
-- ARGV[6]  the node active set key's suffix (keys.node_active_key)
-- ARGV[7]  a stage's index key is ARGV[7] .. name (keys.stage_key(""))
-- ARGV[8]  the states of a launched, unfinished run (in its node's active set), comma-separated
-- ARGV[9]  a node's per-state index key is ARGV[4] .. node .. ARGV[9] .. state (keys.node_state_key)
-- ARGV[10] a node's per-outcome index key is ARGV[4] .. node .. ARGV[10] .. outcome (keys.node_outcome_key)
-- ARGV[11..] ids
-- Returns the number of ids whose record is gone.
local states, outcomes, active = {}, {}, {}
for name in string.gmatch(ARGV[1], '[^,]+') do states[#states + 1] = name end
for name in string.gmatch(ARGV[2], '[^,]+') do outcomes[#outcomes + 1] = name end
for name in string.gmatch(ARGV[8], '[^,]+') do active[name] = true end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local gone = 0
for i = 11, #ARGV do
  local id = ARGV[i]
  local key = ARGV[3] .. id
  local f = redis.call('HMGET', key, 'state', 'created_at', 'node', 'target_node', 'outcome', 'stage', 'purpose')
  local state = f[1]
  if not state then
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', KEYS[1], id)
      redis.call('SREM', KEYS[2], id)
      redis.call('HDEL', KEYS[5], id)
      for k = 6, #KEYS do redis.call('ZREM', KEYS[k], id) end
      gone = gone + 1
    end
  else
    local created = tonumber(f[2] or '0') or 0
    local node, target, stage = f[3] or '', f[4] or '', f[6] or ''
    local outcome = ''
    if state == 'finished' then outcome = f[5] or '' end
    for k, name in ipairs(states) do
      if name == state then redis.call('ZADD', KEYS[5 + k], created, id) else redis.call('ZREM', KEYS[5 + k], id) end
    end
    for k, name in ipairs(outcomes) do
      local index = KEYS[5 + #states + k]
      if name == outcome then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
    end
    if state == 'finished' then redis.call('SREM', KEYS[2], id) else redis.call('SADD', KEYS[2], id) end
    redis.call('HSET', KEYS[5], id, string.lower(f[7] or ''))
    local placed = node
    if placed == '' then placed = target end
    if placed ~= '' then
      redis.call('ZADD', ARGV[4] .. placed .. ARGV[5], created, id)
      for _, name in ipairs(states) do
        local index = ARGV[4] .. placed .. ARGV[9] .. name
        if name == state then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
      end
      for _, name in ipairs(outcomes) do
        local index = ARGV[4] .. placed .. ARGV[10] .. name
        if name == outcome then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
      end
    end
    if node ~= '' and active[state] then redis.call('SADD', ARGV[4] .. node .. ARGV[6], id) end
    if stage ~= '' then redis.call('ZADD', ARGV[7] .. stage, created, id) end
    if state == 'finished' then
      local left = redis.call('PTTL', key)
      if left > 0 then
        redis.call('ZADD', KEYS[3], now + left / 1000, id)
        redis.call('HSET', KEYS[4], id, placed .. '\n' .. stage)
      end
    end
  end
end
return gone
