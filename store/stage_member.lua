-- Index an experiment in its stage, in the MULTI that writes its record: only when the record holds that
-- stage (a claim that lost wrote no record, so nothing is indexed for it).
--
-- KEYS[1] the experiment's record (hash)              (keys.exp_key)
-- KEYS[2] the stage's experiments: id -> created_at   (keys.stage_key)
-- KEYS[3] every stage: name -> created_at             (keys.STAGES)
-- ARGV[1] the stage name
-- ARGV[2] created_at
-- Returns 1 when indexed, else 0.
if redis.call('HGET', KEYS[1], 'stage') ~= ARGV[1] then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], redis.call('HGET', KEYS[1], 'id'))
redis.call('ZADD', KEYS[3], 'NX', ARGV[2], ARGV[1])
return 1
