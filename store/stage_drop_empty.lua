-- Forget a stage that has no experiment left (its last record expired after the retention time, or the
-- only one was withdrawn): its name, settings and bookkeeping go, as its records did. Atomic with the
-- member writes (store/stage_member.lua), so a stage that just got an experiment is never dropped.
--
-- KEYS[1] the stage's experiments: id -> created_at   (keys.stage_key)
-- KEYS[2] the stage's settings (hash)                 (keys.stage_meta_key)
-- KEYS[3] every stage: name -> created_at             (keys.STAGES)
-- ARGV[1] the stage name
-- Returns 1 when dropped, 0 when it still has experiments.
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
