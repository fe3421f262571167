-- The queued records the cluster's queue checker must look at, picked inside Redis so that it reads
-- only those, whatever the queue holds (workers/node/queue_check.py):
--   * a record with a drive job and no owner for which no drive job waits in any RQ queue (nor in a
--     queue's intermediate list): running but unclaimed, failed, dropped or missing: RQ is asked;
--   * a record queued for a node that no live worker serves, not reported yet.
-- The waiting jobs are read from the queues (a drive job's id names its experiment: drive-<id>-<6 hex>),
-- so a queued record whose job waits costs no read of the record and no reply byte.
--
-- KEYS[1]   the queued-state index (keys.state_index_key("queued"))
-- KEYS[2]   RQ's set of queue keys ("rq:queues")
-- ARGV[1]   record key prefix (keys.exp_key(""))
-- ARGV[2]   RQ queue key prefix ("rq:queue:")
-- ARGV[3]   RQ intermediate-list suffix (":intermediate")
-- ARGV[4]   the record field of the node-absent report
-- ARGV[5]   a drive job id's prefix ("drive-")
-- ARGV[6]   the length of a drive job id's suffix after the experiment id ("-<6 hex>": 7)
-- ARGV[7]   a node queue's name prefix ("node:")
-- ARGV[8..] the nodes alive now
-- Returns a flat list: for each record picked, its id, '1' if no drive job of it waits ('0' if only its
-- node is gone), then state, job_id, owner, queue, max_seconds, target_node, created_at and the report
-- field (false when unset).
local fields = {'state', 'job_id', 'owner', 'queue', 'max_seconds', 'target_node', 'created_at', ARGV[4]}
local alive = {}
for i = 8, #ARGV do alive[ARGV[i]] = true end
local waiting, far = {}, {}  -- experiment id -> a drive job of it waits (in the queue of a node not alive)
local job_prefix, suffix, node_prefix = ARGV[5], tonumber(ARGV[6]), ARGV[7]
for _, qkey in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local name = string.sub(qkey, #ARGV[2] + 1)
  local gone = string.sub(name, 1, #node_prefix) == node_prefix and not alive[string.sub(name, #node_prefix + 1)]
  for _, list in ipairs({qkey, qkey .. ARGV[3]}) do
    for _, job in ipairs(redis.call('LRANGE', list, 0, -1)) do
      if string.sub(job, 1, #job_prefix) == job_prefix then
        local exp = string.sub(job, #job_prefix + 1, -suffix - 1)
        waiting[exp] = true
        if gone then far[exp] = true end
      end
    end
  end
end
local function set(v) return v and v ~= '' end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if far[id] or not waiting[id] then
    local v = redis.call('HMGET', ARGV[1] .. id, unpack(fields))
    if v[1] == 'queued' then
      local lost = set(v[2]) and not set(v[3]) and not waiting[id]
      local absent = set(v[6]) and not set(v[8]) and not alive[v[6]]
      if lost or absent then
        out[#out + 1] = id
        out[#out + 1] = lost and '1' or '0'
        for i = 1, #fields do out[#out + 1] = v[i] end
      end
    end
  end
end
return out
