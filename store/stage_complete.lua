-- A stage whose every experiment is finished gets one `stage_finished` task in the outbox (its report and
-- its webhook), once per membership: a stage that grows and finishes again gets another.
--
-- KEYS[1] the stage's experiments: id -> created_at   (keys.stage_key)
-- KEYS[2] the stage's settings (hash)                 (keys.stage_meta_key)
-- KEYS[3] the outbox: task id -> when it is due       (keys.OUTBOX)
-- KEYS[4] the outbox's tasks: task id -> JSON         (keys.OUTBOX_TASKS)
-- ARGV[1] an experiment's record key is ARGV[1] .. id (keys.exp_key(""))
-- ARGV[2] the task id
-- ARGV[3] now: when it is due
-- ARGV[4] the task JSON
-- Returns {1, members} when queued now, {0, members} when not all are finished or it was queued already.
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
if #ids == 0 then return {0, 0} end
for _, id in ipairs(ids) do
  local state = redis.call('HGET', ARGV[1] .. id, 'state')
  if state and state ~= 'finished' then return {0, #ids} end
end
if tonumber(redis.call('HGET', KEYS[2], 'reported_members') or '0') == #ids then return {0, #ids} end
redis.call('HSET', KEYS[2], 'reported_members', #ids, 'reported_task', ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return {1, #ids}
