-- Put existing experiments into a stage after the fact (`ajet-runner stage add`): each record's `stage`
-- field and the stage indexes change together; an experiment in another stage leaves that one.
--
-- KEYS[1] the stage's experiments: id -> created_at   (keys.stage_key)
-- KEYS[2] every stage: name -> created_at             (keys.STAGES)
-- KEYS[3] the stage's settings (hash): its created_at, set once an experiment was added (keys.stage_meta_key)
-- ARGV[1] the stage name
-- ARGV[2] an experiment's record key is ARGV[2] .. id              (keys.exp_key(""))
-- ARGV[3] a stage's index key is ARGV[3] .. name                   (keys.stage_key(""))
-- ARGV[4] now (the stage's created_at when it is new)
-- ARGV[5..] experiment ids
-- Returns the ids that have no record (nothing was done for them).
local missing = {}
local added = 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local rec = ARGV[2] .. id
  if redis.call('EXISTS', rec) == 0 then
    missing[#missing + 1] = id
  else
    local old = redis.call('HGET', rec, 'stage')
    if old and old ~= '' and old ~= ARGV[1] then redis.call('ZREM', ARGV[3] .. old, id) end
    redis.call('HSET', rec, 'stage', ARGV[1])
    redis.call('ZADD', KEYS[1], tonumber(redis.call('HGET', rec, 'created_at') or ARGV[4]) or ARGV[4], id)
    added = added + 1
  end
end
if added > 0 then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[1])
  redis.call('HSETNX', KEYS[3], 'created_at', ARGV[4])
end
return missing
