-- One state change of an experiment: compare-and-set on its `version` (and its owner's lease),
-- the new fields, the event on both streams, the unfinished set, the list filters' indexes (state,
-- outcome, node; the expiry schedule of a finished record) and the /metrics counters, at once.
--
-- The keys of one role each come first, named below; then the keys that come one per state or per
-- outcome, in the order of the names ARGV[7] and ARGV[10] list, and looked up here by that name: how
-- many states and outcomes there are is the caller's list, not this script's layout.
-- KEYS[1]  experiment hash                 (keys.exp_key)
-- KEYS[2]  experiment event stream         (keys.stream_key)
-- KEYS[3]  global event stream             (keys.GLOBAL_STREAM)
-- KEYS[4]  set of unfinished ids           (keys.UNFINISHED)
-- KEYS[5]  counters: transitions           (keys.stats_key("transitions"))
-- KEYS[6]  counters: outcomes              (keys.stats_key("outcomes"))
-- KEYS[7]  counters: duration sums         (keys.stats_key("duration_sum"))
-- KEYS[8]  counters: repairs               (keys.stats_key("repairs"))
-- KEYS[9]  counters: advised               (keys.stats_key("advised"))
-- KEYS[10] counters: result write failures (keys.stats_key("result_write_failures"))
-- KEYS[11] the node's set of active (launched, unfinished) ids (keys.node_active_key(ARGV[8]))
-- KEYS[12] when each finished record expires, zset id -> time (keys.EXPIRING): the indexes' clean-up
-- KEYS[13] the experiment's log tail list (keys.log_tail_key): expires with the record
-- KEYS[14] the experiment's last event number per writer (keys.published_key): expires with the record
-- KEYS[15] result dir -> claim hash (keys.RESULT_DIRS): the finishing transition releases the record's claim
-- KEYS[16] id -> "<node>\n<stage>" of each record in KEYS[12] (keys.EXPIRING_WHERE): the keys it leaves then
-- KEYS[17] id -> purpose, lower-cased (keys.PURPOSES): what a purpose search reads, written once
-- KEYS[18..] for each state ARGV[7] names, its index, zset id -> created_at (keys.state_index_key); then
--          for each outcome ARGV[10] names, its index of finished records (keys.outcome_index_key) and its
--          duration buckets (keys.duration_bucket_key: bumped for the outcome counted, and all kept as
--          long as the counters)
-- ARGV[1]  expected version ("" = any)
-- ARGV[2]  owner that must hold the record ("" = none required)
-- ARGV[3]  event JSON
-- ARGV[4]  stats JSON {"transition", "outcome", "duration", "buckets", "repair", "advised", "write_failure"}
-- ARGV[5]  MAXLEN of the experiment stream (approximate)
-- ARGV[6]  MAXLEN of the global stream (approximate)
-- ARGV[7]  the state names, comma-separated: the order of their keys from KEYS[18]
-- ARGV[8]  the node KEYS[11] belongs to ("" = none: the active set untouched)
-- ARGV[9]  seconds a finished record is kept (its hash, stream and tail expire; 0 = for ever); the
--          counters KEYS[5..10] and the duration buckets expire that long after the last transition, when
--          every record they counted has expired too
-- ARGV[10] the outcome names, comma-separated: the order of their key pairs after the states' keys
-- ARGV[11] a node's index key is ARGV[11] .. node .. ARGV[12] (keys.node_index_key): the record's node
--          (else its target node) has it in its index, and a node it left does not
-- ARGV[12] the node index key's suffix
-- ARGV[13] a node's per-state index key is ARGV[11] .. node .. ARGV[13] .. state (keys.node_state_key)
-- ARGV[14] a node's per-outcome index key is ARGV[11] .. node .. ARGV[14] .. outcome (keys.node_outcome_key):
--          the combined filters node + state and node + outcome read one zset
-- ARGV[15..] field, value, field, value, ... to set on the hash
-- Returns {1, new version} or {0, "missing" | "version" | "owner"}; an error when the keys do not match
-- the names, or the outcome counted has no buckets key (before anything is written).
local EXP, STREAM, GLOBAL, UNFINISHED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local TRANSITIONS, OUTCOMES, DURATION_SUM = KEYS[5], KEYS[6], KEYS[7]
local REPAIRS, ADVISED, WRITE_FAILURES = KEYS[8], KEYS[9], KEYS[10]
local NODE_ACTIVE, EXPIRING, LOG_TAIL, PUBLISHED = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local RESULT_DIRS, EXPIRING_WHERE, PURPOSES = KEYS[15], KEYS[16], KEYS[17]
local FIRST_NAMED = 18
local state_index, outcome_index, buckets = {}, {}, {}
local state_names, outcome_names = {}, {}
local k = FIRST_NAMED
for name in string.gmatch(ARGV[7], '[^,]+') do
  state_names[#state_names + 1] = name
  state_index[name] = KEYS[k]
  k = k + 1
end
for name in string.gmatch(ARGV[10], '[^,]+') do
  outcome_names[#outcome_names + 1] = name
  outcome_index[name] = KEYS[k]
  buckets[name] = KEYS[k + 1]
  k = k + 2
end
if k - 1 ~= #KEYS then
  return redis.error_reply('transition: ' .. #KEYS .. ' keys for ' .. #state_names .. ' states and '
                           .. #outcome_names .. ' outcomes')
end
local stats = cjson.decode(ARGV[4])
if stats['outcome'] and not buckets[stats['outcome']] then
  return redis.error_reply('transition: no duration buckets key for outcome ' .. tostring(stats['outcome']))
end
local cur = redis.call('HGET', EXP, 'version')
if not cur then return {0, 'missing'} end
if ARGV[1] ~= '' and cur ~= ARGV[1] then return {0, 'version'} end
if ARGV[2] ~= '' then
  local owner = redis.call('HGET', EXP, 'owner')
  if owner and owner ~= '' and owner ~= ARGV[2] then
    local lease = tonumber(redis.call('HGET', EXP, 'lease_until') or '0') or 0
    local t = redis.call('TIME')
    if lease > tonumber(t[1]) + tonumber(t[2]) / 1e6 then return {0, 'owner'} end
  end
end
local before = redis.call('HMGET', EXP, 'node', 'target_node', 'state', 'outcome')
local fields = {}
for i = 15, #ARGV do fields[#fields + 1] = ARGV[i] end
if #fields > 0 then redis.call('HSET', EXP, unpack(fields)) end
local version = redis.call('HINCRBY', EXP, 'version', 1)
local event = cjson.decode(ARGV[3])
local id = redis.call('HGET', EXP, 'id')
local payload = {'id', id, 'type', event['type'] or 'transition',
                 'version', tostring(version), 'data', ARGV[3]}
redis.call('XADD', STREAM, 'MAXLEN', '~', ARGV[5], '*', unpack(payload))
redis.call('XADD', GLOBAL, 'MAXLEN', '~', ARGV[6], '*', unpack(payload))
local state = redis.call('HGET', EXP, 'state') or ''
local created = tonumber(redis.call('HGET', EXP, 'created_at') or '0') or 0
if state == 'finished' then
  redis.call('SREM', UNFINISHED, id)
else
  redis.call('SADD', UNFINISHED, id)
end
if redis.call('HEXISTS', PURPOSES, id) == 0 then
  redis.call('HSET', PURPOSES, id, string.lower(redis.call('HGET', EXP, 'purpose') or ''))
end
for _, name in ipairs(state_names) do
  local index = state_index[name]
  if name == state then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
end
local outcome = ''
if state == 'finished' then outcome = redis.call('HGET', EXP, 'outcome') or '' end
for _, name in ipairs(outcome_names) do
  local index = outcome_index[name]
  if name == outcome then redis.call('ZADD', index, created, id) else redis.call('ZREM', index, id) end
end
local node = redis.call('HGET', EXP, 'node') or ''
local target = redis.call('HGET', EXP, 'target_node') or ''
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
    redis.call('SADD', NODE_ACTIVE, id)
  else
    redis.call('SREM', NODE_ACTIVE, id)
  end
end
if state == 'finished' then
  local claim = redis.call('HGET', EXP, 'result_dir_claim')
  if claim and claim ~= '' and redis.call('HGET', RESULT_DIRS, claim) == id then
    redis.call('HDEL', RESULT_DIRS, claim)
  end
end
local keep = tonumber(ARGV[9]) or 0
if state == 'finished' and keep > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', EXPIRING, tonumber(t[1]) + keep, id)
  redis.call('HSET', EXPIRING_WHERE, id, placed .. '\n' .. (redis.call('HGET', EXP, 'stage') or ''))
  redis.call('EXPIRE', EXP, keep)
  redis.call('EXPIRE', STREAM, keep)
  redis.call('EXPIRE', LOG_TAIL, keep)
  redis.call('EXPIRE', PUBLISHED, keep)
end
if stats['transition'] then redis.call('HINCRBY', TRANSITIONS, stats['transition'], 1) end
if stats['outcome'] then
  redis.call('HINCRBY', OUTCOMES, stats['outcome'], 1)
  local d = tonumber(stats['duration'] or '0')
  redis.call('HINCRBYFLOAT', DURATION_SUM, stats['outcome'], d)
  for _, b in ipairs(stats['buckets']) do
    if b == 'inf' or d <= tonumber(b) then
      redis.call('HINCRBY', buckets[stats['outcome']], b, 1)
    end
  end
end
if stats['repair'] then redis.call('HINCRBY', REPAIRS, stats['repair'], 1) end
if stats['advised'] then redis.call('HINCRBY', ADVISED, stats['advised'], 1) end
if stats['write_failure'] then
  redis.call('HINCRBY', WRITE_FAILURES, stats['write_failure'], 1)
end
if keep > 0 then
  for _, counter in ipairs({TRANSITIONS, OUTCOMES, DURATION_SUM, REPAIRS, ADVISED, WRITE_FAILURES}) do
    redis.call('EXPIRE', counter, keep)
  end
  for _, name in ipairs(outcome_names) do redis.call('EXPIRE', buckets[name], keep) end
end
return {1, tostring(version)}
