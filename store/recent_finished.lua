-- /metrics: the fields of the records that finished within the TTL, in one command (a pipeline of
-- thousands of HMGETs costs redis-py ~30 µs each to pack and parse; one flat reply costs a few).
-- The expiry schedule says when each finished record expires (finish + retention), so those expiring
-- after ARGV[1] finished within the TTL; the caller checks each one's own finished_at.
--
-- KEYS[1]  when each finished record expires, zset id -> time (keys.EXPIRING)
-- ARGV[1]  the lowest expiry time wanted (now - TTL + retention)
-- ARGV[2]  an experiment's record key is ARGV[2] .. id (keys.exp_key(""))
-- ARGV[3..] the fields to read of each
-- Returns id, field values..., id, field values..., flat (a missing field is nil).
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf')) do
  out[#out + 1] = id
  local values = redis.call('HMGET', ARGV[2] .. id, unpack(fields))
  for i = 1, #fields do out[#out + 1] = values[i] end
end
return out
