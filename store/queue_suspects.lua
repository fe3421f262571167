-- The queued records the cluster's queue checker must look at, picked inside Redis so that the checker
-- reads only those, whatever the queue holds (workers/node/queue_check.py):
--   * a record with a drive job and no owner whose job is not waiting in its RQ queue (nor in the
--     queue's intermediate list): running but unclaimed, failed, dropped or missing: RQ is asked;
--   * a record queued for a node that no live worker serves, not reported yet.
-- A queued job waiting in its queue is healthy and costs no reply byte.
--
-- KEYS[1]   the queued-state index (keys.state_index_key("queued"))
-- ARGV[1]   record key prefix (keys.exp_key(""))
-- ARGV[2]   RQ queue key prefix ("rq:queue:")
-- ARGV[3]   RQ intermediate-list suffix (":intermediate")
-- ARGV[4]   the default queue name (for a record without one)
-- ARGV[5]   the record field of the node-absent report
-- ARGV[6..] the nodes alive now
-- Returns a flat list: for each record picked, its id, '1' if its job is not waiting ('0' if only its
-- node is gone), then state, job_id, owner, queue, max_seconds, target_node, created_at and the report
-- field (false when unset).
local fields = {'state', 'job_id', 'owner', 'queue', 'max_seconds', 'target_node', 'created_at', ARGV[5]}
local alive = {}
for i = 6, #ARGV do alive[ARGV[i]] = true end
local waiting = {}
local function is_waiting(name, job)
  local set = waiting[name]
  if not set then
    set = {}
    local key = ARGV[2] .. name
    for _, id in ipairs(redis.call('LRANGE', key, 0, -1)) do set[id] = true end
    for _, id in ipairs(redis.call('LRANGE', key .. ARGV[3], 0, -1)) do set[id] = true end
    waiting[name] = set
  end
  return set[job] == true
end
local function set(v) return v and v ~= '' end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = redis.call('HMGET', ARGV[1] .. id, unpack(fields))
  if v[1] == 'queued' then
    local queue = set(v[4]) and v[4] or ARGV[4]
    local lost = set(v[2]) and not set(v[3]) and not is_waiting(queue, v[2])
    local absent = set(v[6]) and not set(v[8]) and not alive[v[6]]
    if lost or absent then
      out[#out + 1] = id
      out[#out + 1] = lost and '1' or '0'
      for i = 1, #fields do out[#out + 1] = v[i] end
    end
  end
end
return out
