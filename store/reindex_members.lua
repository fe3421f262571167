-- The upgrade's backfill, second pass: members of one node's (or one stage's) index that do not belong
-- there (their record is gone, or now names another node or stage) leave it.
--
-- KEYS[1]  the index, zset id -> created_at (keys.node_index_key or keys.stage_key)
-- ARGV[1]  the node or stage the index is for
-- ARGV[2]  "node": a member belongs when its record's node (else its target node) is ARGV[1];
--          "stage": when its record's stage is ARGV[1]
-- ARGV[3]  an experiment's record key is ARGV[3] .. id (keys.exp_key(""))
-- ARGV[4..] the members to check
-- Returns the number of members removed.
local removed = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', ARGV[3] .. id, 'node', 'target_node', 'stage', 'state')
  local belongs
  if not f[4] and redis.call('EXISTS', ARGV[3] .. id) == 0 then
    belongs = false
  elseif ARGV[2] == 'stage' then
    belongs = (f[3] or '') == ARGV[1]
  else
    local placed = f[1] or ''
    if placed == '' then placed = f[2] or '' end
    belongs = placed == ARGV[1]
  end
  if not belongs then
    redis.call('ZREM', KEYS[1], id)
    removed = removed + 1
  end
end
return removed
