-- Change the phase (launch / stop / done) of a gang's current launch, nothing else.
--
-- KEYS[1]  the gang hash                       (keys.gang_key)
-- ARGV[1]  phase
-- Returns 1 when set, 0 when the gang or its launch does not exist.
local raw = redis.call('HGET', KEYS[1], 'launch')
if not raw then return 0 end
local launch = cjson.decode(raw)
launch['phase'] = ARGV[1]
redis.call('HSET', KEYS[1], 'launch', cjson.encode(launch))
return 1
