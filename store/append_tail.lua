-- New log lines onto an experiment's capped log-tail list, and its log byte count, in one call:
-- the watcher sends only the lines it has not sent before (not the whole tail every second).
--
-- KEYS[1]  the tail list       (keys.log_tail_key)
-- KEYS[2]  experiment hash     (keys.exp_key)
-- ARGV[1]  cap (lines kept)
-- ARGV[2]  log bytes read so far ("" = leave as is)
-- ARGV[3]  1 = replace the list (the lines since the last call were more than the cap), else append
-- ARGV[4..] the lines, oldest first
-- Returns the list's length. Does nothing (returns -1) once the experiment is gone.
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if ARGV[3] == '1' then redis.call('DEL', KEYS[1]) end
if #ARGV >= 4 then
  local lines = {}
  for i = 4, #ARGV do lines[#lines + 1] = ARGV[i] end
  redis.call('RPUSH', KEYS[1], unpack(lines))
  redis.call('LTRIM', KEYS[1], -tonumber(ARGV[1]), -1)
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], 'log_bytes', ARGV[2]) end
return redis.call('LLEN', KEYS[1])
