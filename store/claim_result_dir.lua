-- Claim a result dir for one experiment and, in the same step, write the experiment's record: one live
-- experiment per result dir, decided here and nowhere else (a check followed by a write lets two
-- concurrent submissions both pass the check).
--
-- A claim is the field <real path of the dir> of KEYS[1]. Its value is the holder's id (a claim backed
-- by that experiment's record: live while the record exists and is not finished), or "<id> <until>"
-- (a hold without a record, e.g. while a refusal report is written: live until the epoch <until>).
-- A dir is taken when a live claim names the same dir, a dir inside it, or a dir it is inside (an
-- archive of the outer dir would move the inner one's files). Claims whose holder finished, vanished
-- or ran out are dropped as they are met, so the hash holds the live claims only.
--
-- KEYS[1] result dir -> claim hash            (keys.RESULT_DIRS)
-- KEYS[2] the new experiment's record (hash)  (keys.exp_key(id)); untouched for a hold
-- KEYS[3] zset id -> created_at               (keys.INDEX); untouched for a hold
-- ARGV[1] the result dir (a real path, no trailing slash)
-- ARGV[2] the experiment id
-- ARGV[3] an experiment's hash key is ARGV[3] .. id (keys.exp_key(""))
-- ARGV[4] seconds of a hold without a record ("0": the claim is backed by the record ARGV[6..] writes)
-- ARGV[5] created_at, the record's score in KEYS[3]
-- ARGV[6..] field, value, ... of the record
-- Returns {1} when claimed, else {0, holder id, its state ("holding" for a hold), the dir it holds}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6

local function under(path, dir)
  if path == dir then return true end
  local prefix = dir
  if string.sub(dir, -1) ~= '/' then prefix = dir .. '/' end
  return string.sub(path, 1, #prefix) == prefix
end

local function live(value)
  local id, untl = string.match(value, '^(%S+) (%S+)$')
  if id then
    if (tonumber(untl) or 0) > now then return id, 'holding' end
    return nil, nil
  end
  local state = redis.call('HGET', ARGV[3] .. value, 'state')
  if state and state ~= 'finished' then return value, state end
  return nil, nil
end

local claims = redis.call('HGETALL', KEYS[1])
for i = 1, #claims, 2 do
  local dir = claims[i]
  local holder, state = live(claims[i + 1])
  if not holder then
    redis.call('HDEL', KEYS[1], dir)
  elseif holder ~= ARGV[2] and (under(ARGV[1], dir) or under(dir, ARGV[1])) then
    return {0, holder, state, dir}
  end
end

local hold = tonumber(ARGV[4]) or 0
if hold > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. string.format('%.3f', now + hold))
  return {1}
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, ARGV[2], 'exists', ARGV[1]} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
if #fields > 0 then redis.call('HSET', KEYS[2], unpack(fields)) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[2])
return {1}
