-- A work-horse's watch-loop metrics since its last flush, in one call (it flushes every 15 s).
--
-- KEYS[1]  the node's watch counters   (keys.watch_metrics_key)
-- KEYS[2]  the node's experiment index (keys.watch_exps_key)
-- KEYS[3..] one hash per experiment    (keys.watch_exp_key), in the order of the ARGV groups below
-- ARGV[1]  TTL of the node keys (seconds)
-- ARGV[2]  TTL of an experiment's hash (seconds)
-- ARGV[3]  loop seconds to add to `sum` ("" = no pass counted)
-- ARGV[4]  passes to add to `count`
-- ARGV[5]  number of bucket pairs B, then B pairs: bucket bound, passes in it
-- then, per experiment of KEYS[3..]: id, log bytes to add, age, observed at
local wk = KEYS[1]
local i = 6
for _ = 1, tonumber(ARGV[5]) do
  redis.call('HINCRBY', wk, ARGV[i], ARGV[i + 1])
  i = i + 2
end
if ARGV[3] ~= '' then
  redis.call('HINCRBYFLOAT', wk, 'sum', ARGV[3])
  redis.call('HINCRBY', wk, 'count', ARGV[4])
  redis.call('EXPIRE', wk, ARGV[1])
end
for k = 3, #KEYS do
  redis.call('HINCRBY', KEYS[k], 'log_bytes', ARGV[i + 1])
  redis.call('HSET', KEYS[k], 'age', ARGV[i + 2], 'at', ARGV[i + 3])
  redis.call('EXPIRE', KEYS[k], ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[i + 3], ARGV[i])
  i = i + 4
end
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
