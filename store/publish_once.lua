-- Publish an event at most once: a writer's retry after a lost reply (or a copy of it still in
-- Redis's input buffer when the writer gave up on the socket) finds its sequence number already
-- recorded and adds nothing. A writer numbers its events 1, 2, 3, ... in the order it sends them.
--
-- KEYS[1]  experiment event stream          (keys.stream_key)
-- KEYS[2]  global event stream              (keys.GLOBAL_STREAM)
-- KEYS[3]  last sequence number per writer  (keys.published_key)
-- ARGV[1]  writer (unique per Journal)
-- ARGV[2]  this event's sequence number
-- ARGV[3]  MAXLEN of the experiment stream (approximate)
-- ARGV[4]  MAXLEN of the global stream (approximate)
-- ARGV[5]  experiment id
-- ARGV[6]  event type
-- ARGV[7]  event JSON
-- Returns the new entry id, or "" when this event was published already.
local last = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if last >= tonumber(ARGV[2]) then return '' end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
local ttl = redis.call('TTL', KEYS[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[3], ttl) end  -- a finished record's: expire together
local entry = {'id', ARGV[5], 'type', ARGV[6], 'data', ARGV[7]}
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', unpack(entry))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(entry))
return id
