-- Record a rank's state, only by the job that holds the rank (owner '' = the head, which claims nothing).
--
-- KEYS[1]  the gang hash                       (keys.gang_key)
-- ARGV[1]  rank
-- ARGV[2]  owner, or ''
-- ARGV[3]  the state (JSON)
-- Returns 1 when written, 0 otherwise (or when the gang does not exist).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local r = 'r' .. ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], r .. ':owner') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], r, ARGV[3])
return 1
