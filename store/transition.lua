-- One state change of an experiment: compare-and-set on its `version` (and its owner's lease),
-- the new fields, the event on both streams, the unfinished set, the list filters' indexes (state,
-- outcome, node; the expiry schedule of a finished record) and the /metrics counters, at once.
--
-- KEYS[1]  experiment hash                 (keys.exp_key)
-- KEYS[2]  experiment event stream         (keys.stream_key)
-- KEYS[3]  global event stream             (keys.GLOBAL_STREAM)
-- KEYS[4]  set of unfinished ids           (keys.UNFINISHED)
-- KEYS[5]  counters: transitions           (keys.stats_key("transitions"))
-- KEYS[6]  counters: outcomes              (keys.stats_key("outcomes"))
-- KEYS[7]  counters: duration sums         (keys.stats_key("duration_sum"))
-- KEYS[8]  duration buckets of the outcome (keys.duration_bucket_key(outcome); untouched without one)
-- KEYS[9]  counters: repairs               (keys.stats_key("repairs"))
-- KEYS[10] counters: advised               (keys.stats_key("advised"))
-- KEYS[11] counters: result write failures (keys.stats_key("result_write_failures"))
-- KEYS[12] per-state index, zset id -> created_at: the 1st state ARGV[7] names (keys.state_index_key)
-- KEYS[13] per-state index, zset id -> created_at: the 2nd state ARGV[7] names (keys.state_index_key)
-- KEYS[14] per-state index, zset id -> created_at: the 3rd state ARGV[7] names (keys.state_index_key)
-- KEYS[15] per-state index, zset id -> created_at: the 4th state ARGV[7] names (keys.state_index_key)
-- KEYS[16] per-state index, zset id -> created_at: the 5th state ARGV[7] names (keys.state_index_key)
-- KEYS[17] per-state index, zset id -> created_at: the 6th state ARGV[7] names (keys.state_index_key)
-- KEYS[18] per-state index, zset id -> created_at: the 7th state ARGV[7] names (keys.state_index_key)
-- KEYS[19] the node's set of active (launched, unfinished) ids (keys.node_active_key(ARGV[8]))
-- KEYS[20] when each finished record expires, zset id -> time (keys.EXPIRING): the indexes' clean-up
-- KEYS[21] the experiment's log tail list (keys.log_tail_key): expires with the record
-- KEYS[22] the experiment's last event number per writer (keys.published_key): expires with the record
-- KEYS[23] result dir -> claim hash (keys.RESULT_DIRS): the finishing transition releases the record's claim
-- KEYS[24] duration buckets of outcome completed     (keys.duration_bucket_key): kept as long as the counters
-- KEYS[25] duration buckets of outcome early_stopped (keys.duration_bucket_key)
-- KEYS[26] duration buckets of outcome timed_out     (keys.duration_bucket_key)
-- KEYS[27] duration buckets of outcome failed        (keys.duration_bucket_key)
-- KEYS[28] duration buckets of outcome cancelled     (keys.duration_bucket_key)
-- KEYS[29] id -> "<node>\n<stage>" of each record in KEYS[20] (keys.EXPIRING_WHERE): the keys it leaves then
-- KEYS[30] per-outcome index of finished records, zset id -> created_at: the 1st outcome ARGV[10] names
-- KEYS[31] per-outcome index: the 2nd outcome ARGV[10] names (keys.outcome_index_key)
-- KEYS[32] per-outcome index: the 3rd outcome ARGV[10] names (keys.outcome_index_key)
-- KEYS[33] per-outcome index: the 4th outcome ARGV[10] names (keys.outcome_index_key)
-- KEYS[34] per-outcome index: the 5th outcome ARGV[10] names (keys.outcome_index_key)
-- KEYS[35] id -> purpose, lower-cased (keys.PURPOSES): what a purpose search reads, written once
-- ARGV[1]  expected version ("" = any)
-- ARGV[2]  owner that must hold the record ("" = none required)
-- ARGV[3]  event JSON
-- ARGV[4]  stats JSON {"transition", "outcome", "duration", "buckets", "repair", "advised", "write_failure"}
-- ARGV[5]  MAXLEN of the experiment stream (approximate)
-- ARGV[6]  MAXLEN of the global stream (approximate)
-- ARGV[7]  the state names of KEYS[12] to KEYS[18], in that order, comma-separated
-- ARGV[8]  the node KEYS[19] belongs to ("" = none: the active set untouched)
-- ARGV[9]  seconds a finished record is kept (its hash, stream and tail expire; 0 = for ever); the
--          counters KEYS[5..11] and KEYS[24..28] expire that long after the last transition, when every
--          record they counted has expired too
-- ARGV[10] the outcome names of KEYS[30] to KEYS[34], in that order, comma-separated
-- ARGV[11] a node's index key is ARGV[11] .. node .. ARGV[12] (keys.node_index_key): the record's node
--          (else its target node) has it in its index, and a node it left does not
-- ARGV[12] the node index key's suffix
-- ARGV[13] a node's per-state index key is ARGV[11] .. node .. ARGV[13] .. state (keys.node_state_key)
-- ARGV[14] a node's per-outcome index key is ARGV[11] .. node .. ARGV[14] .. outcome (keys.node_outcome_key):
--          the combined filters node + state and node + outcome read one zset
-- ARGV[15..] field, value, field, value, ... to set on the hash
-- Returns {1, new version} or {0, "missing" | "version" | "owner"}.
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then return {0, 'missing'} end
if ARGV[1] ~= '' and cur ~= ARGV[1] then return {0, 'version'} end
if ARGV[2] ~= '' then
  local owner = redis.call('HGET', KEYS[1], 'owner')
  if owner and owner ~= '' and owner ~= ARGV[2] then
    local lease = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0') or 0
    local t = redis.call('TIME')
    if lease > tonumber(t[1]) + tonumber(t[2]) / 1e6 then return {0, 'owner'} end
  end
end
local before = redis.call('HMGET', KEYS[1], 'node', 'target_node', 'state', 'outcome')
local fields = {}
for i = 15, #ARGV do fields[#fields + 1] = ARGV[i] end
if #fields > 0 then redis.call('HSET', KEYS[1], unpack(fields)) end
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
local event = cjson.decode(ARGV[3])
local id = redis.call('HGET', KEYS[1], 'id')
local payload = {'id', id, 'type', event['type'] or 'transition',
                 'version', tostring(version), 'data', ARGV[3]}
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', unpack(payload))
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', unpack(payload))
local state = redis.call('HGET', KEYS[1], 'state') or ''
local created = tonumber(redis.call('HGET', KEYS[1], 'created_at') or '0') or 0
if state == 'finished' then
  redis.call('SREM', KEYS[4], id)
else
  redis.call('SADD', KEYS[4], id)
end
if redis.call('HEXISTS', KEYS[35], id) == 0 then
  redis.call('HSET', KEYS[35], id, string.lower(redis.call('HGET', KEYS[1], 'purpose') or ''))
end
local state_keys = {KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]}
local k = 1
for name in string.gmatch(ARGV[7], '[^,]+') do
  local index = state_keys[k]
  if name == state then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
  k = k + 1
end
local outcome = ''
if state == 'finished' then outcome = redis.call('HGET', KEYS[1], 'outcome') or '' end
local outcome_keys = {KEYS[30], KEYS[31], KEYS[32], KEYS[33], KEYS[34]}
k = 1
for name in string.gmatch(ARGV[10], '[^,]+') do
  local index = outcome_keys[k]
  if name == outcome then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
  k = k + 1
end
local node = redis.call('HGET', KEYS[1], 'node') or ''
local target = redis.call('HGET', KEYS[1], 'target_node') or ''
local placed = node
if placed == '' then placed = target end
local was = before[1] or ''
if was == '' then was = before[2] or '' end
if was ~= '' and was ~= placed then redis.call('ZREM', ARGV[11] .. was .. ARGV[12], id) end
if placed ~= '' then redis.call('ZADD', ARGV[11] .. placed .. ARGV[12], created, id) end
local was_state = before[3] or ''
local was_outcome = ''
if was_state == 'finished' then was_outcome = before[4] or '' end
if was ~= '' and was_state ~= '' and (was ~= placed or was_state ~= state) then
  redis.call('ZREM', ARGV[11] .. was .. ARGV[13] .. was_state, id)
end
if placed ~= '' and state ~= '' then redis.call('ZADD', ARGV[11] .. placed .. ARGV[13] .. state, created, id) end
if was ~= '' and was_outcome ~= '' and (was ~= placed or was_outcome ~= outcome) then
  redis.call('ZREM', ARGV[11] .. was .. ARGV[14] .. was_outcome, id)
end
if placed ~= '' and outcome ~= '' then
  redis.call('ZADD', ARGV[11] .. placed .. ARGV[14] .. outcome, created, id)
end
if ARGV[8] ~= '' then
  if node == ARGV[8] and state ~= 'finished' and state ~= 'queued' then
    redis.call('SADD', KEYS[19], id)
  else
    redis.call('SREM', KEYS[19], id)
  end
end
if state == 'finished' then
  local claim = redis.call('HGET', KEYS[1], 'result_dir_claim')
  if claim and claim ~= '' and redis.call('HGET', KEYS[23], claim) == id then
    redis.call('HDEL', KEYS[23], claim)
  end
end
local keep = tonumber(ARGV[9]) or 0
if state == 'finished' and keep > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[20], tonumber(t[1]) + keep, id)
  redis.call('HSET', KEYS[29], id, placed .. '\n' .. (redis.call('HGET', KEYS[1], 'stage') or ''))
  redis.call('EXPIRE', KEYS[1], keep)
  redis.call('EXPIRE', KEYS[2], keep)
  redis.call('EXPIRE', KEYS[21], keep)
  redis.call('EXPIRE', KEYS[22], keep)
end
local stats = cjson.decode(ARGV[4])
if stats['transition'] then redis.call('HINCRBY', KEYS[5], stats['transition'], 1) end
if stats['outcome'] then
  redis.call('HINCRBY', KEYS[6], stats['outcome'], 1)
  local d = tonumber(stats['duration'] or '0')
  redis.call('HINCRBYFLOAT', KEYS[7], stats['outcome'], d)
  for _, b in ipairs(stats['buckets']) do
    if b == 'inf' or d <= tonumber(b) then
      redis.call('HINCRBY', KEYS[8], b, 1)
    end
  end
end
if stats['repair'] then redis.call('HINCRBY', KEYS[9], stats['repair'], 1) end
if stats['advised'] then redis.call('HINCRBY', KEYS[10], stats['advised'], 1) end
if stats['write_failure'] then
  redis.call('HINCRBY', KEYS[11], stats['write_failure'], 1)
end
if keep > 0 then
  for _, counter in ipairs({KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11],
                            KEYS[24], KEYS[25], KEYS[26], KEYS[27], KEYS[28]}) do
    redis.call('EXPIRE', counter, keep)
  end
end
return {1, tostring(version)}
