-- Index an experiment in its stage, in the MULTI that writes its record: only when the record holds that
-- stage (a claim that lost wrote no record, so nothing is indexed for it). The stage's settings given with
-- the submission are written here too, so a stage and its settings exist only once an experiment of it was
-- accepted: a refused submission records nothing and rewrites no earlier settings.
--
-- KEYS[1] the experiment's record (hash)              (keys.exp_key)
-- KEYS[2] the stage's experiments: id -> created_at   (keys.stage_key)
-- KEYS[3] every stage: name -> created_at             (keys.STAGES)
-- KEYS[4] the stage's settings (hash)                 (keys.stage_meta_key)
-- ARGV[1] the stage name
-- ARGV[2] created_at
-- ARGV[3..] settings as field, value pairs (dir, webhook_url), possibly none
-- Returns 1 when indexed, else 0.
if redis.call('HGET', KEYS[1], 'stage') ~= ARGV[1] then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], redis.call('HGET', KEYS[1], 'id'))
redis.call('ZADD', KEYS[3], 'NX', ARGV[2], ARGV[1])
redis.call('HSETNX', KEYS[4], 'created_at', ARGV[2])
for i = 3, #ARGV - 1, 2 do redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) end
return 1
