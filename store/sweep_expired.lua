-- The indexes' clean-up after the retention time: a finished record's hash expires by itself (EXPIRE,
-- set by transition.lua, which also schedules it in KEYS[1]); its ids leave every index here, run before
-- each filtered list, so counts and pages never include expired records.
--
-- KEYS[1]    when each finished record expires, zset id -> time (keys.EXPIRING)
-- KEYS[2]    id -> "<node>\n<stage>" (keys.EXPIRING_WHERE): its node's and its stage's index
-- KEYS[3..]  indexes every id leaves: keys.INDEX, the per-state and per-outcome zsets (ZREM),
--            keys.UNFINISHED (a set: SREM) and keys.PURPOSES (a hash: HDEL), as ARGV[5] says
-- ARGV[1]    an experiment's record key is ARGV[1] .. id (keys.exp_key(""))
-- ARGV[2]    a node's index key is ARGV[2] .. node .. ARGV[3] (keys.node_index_key)
-- ARGV[3]    the node index key's suffix
-- ARGV[4]    a stage's index key is ARGV[4] .. name (keys.stage_key(""))
-- ARGV[5]    for KEYS[3..], "z" (a zset), "s" (a set) or "h" (a hash) each, e.g. "zszh"
-- ARGV[6]    most ids looked at in one call
-- ARGV[7]    a node's per-state index key is ARGV[2] .. node .. ARGV[7] .. state (keys.node_state_key)
-- ARGV[8]    a node's per-outcome index key is ARGV[2] .. node .. ARGV[8] .. outcome (keys.node_outcome_key)
-- ARGV[9]    the outcome names, comma-separated
-- ARGV[10]   a stage's settings key is ARGV[10] .. name (keys.stage_meta_key("")); a stage whose last
--            experiment expired goes with it: its settings, and its name from ARGV[11]
-- ARGV[11]   every stage: name -> created_at (keys.STAGES)
-- ARGV[12]   the outbox's dead tasks (keys.OUTBOX_DEAD, a list, newest first): the oldest ones given up more
--            than ARGV[13] seconds ago (the records' retention; 0 = never) go, a batch per call
-- ARGV[13]   that retention in seconds
-- Returns the number of expired records whose ids left the indexes.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))
local gone = 0
for _, id in ipairs(due) do
  local left = redis.call('PTTL', ARGV[1] .. id)
  if left == -2 then
    for i = 3, #KEYS do
      local kind = string.sub(ARGV[5], i - 2, i - 2)
      if kind == 's' then redis.call('SREM', KEYS[i], id)
      elseif kind == 'h' then redis.call('HDEL', KEYS[i], id)
      else redis.call('ZREM', KEYS[i], id) end
    end
    local where = redis.call('HGET', KEYS[2], id) or ''
    local node, stage = string.match(where, '^(.-)\n(.*)$')
    if node and node ~= '' then
      redis.call('ZREM', ARGV[2] .. node .. ARGV[3], id)
      redis.call('ZREM', ARGV[2] .. node .. ARGV[7] .. 'finished', id)
      for name in string.gmatch(ARGV[9], '[^,]+') do redis.call('ZREM', ARGV[2] .. node .. ARGV[8] .. name, id) end
    end
    if stage and stage ~= '' then
      redis.call('ZREM', ARGV[4] .. stage, id)
      if ARGV[10] and redis.call('EXISTS', ARGV[4] .. stage) == 0 then
        redis.call('DEL', ARGV[10] .. stage)
        redis.call('ZREM', ARGV[11], stage)
      end
    end
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    gone = gone + 1
  elseif left == -1 then
    redis.call('ZREM', KEYS[1], id)  -- kept for ever now (retention 0)
    redis.call('HDEL', KEYS[2], id)
  else
    redis.call('ZADD', KEYS[1], now + left / 1000, id)  -- its expiry moved: look again then
  end
end
local retention = tonumber(ARGV[13] or '0') or 0
if ARGV[12] and retention > 0 then
  for _ = 1, tonumber(ARGV[6]) do
    local oldest = redis.call('LINDEX', ARGV[12], -1)
    if not oldest then break end
    local ok, task = pcall(cjson.decode, oldest)
    local at = ok and type(task) == 'table' and tonumber(task['given_up_at']) or nil
    if at and at >= now - retention then break end
    redis.call('RPOP', ARGV[12])  -- expired (or unreadable: nothing could ever show it)
  end
end
return gone
