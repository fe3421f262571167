-- Take the next due outbox task for a while: its due time moves `lease` seconds ahead, so a deliverer that
-- dies while handling it leaves it to be taken again (delivered at least once).
--
-- KEYS[1] the outbox: task id -> when it is due   (keys.OUTBOX)
-- KEYS[2] the outbox's tasks: task id -> JSON     (keys.OUTBOX_TASKS)
-- ARGV[1] now (epoch seconds)
-- ARGV[2] the lease (seconds)
-- Returns {task id, JSON} or nil when nothing is due. A task id without JSON is dropped as it is met.
for _ = 1, 100 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
  if #due == 0 then return nil end
  local id = due[1]
  local body = redis.call('HGET', KEYS[2], id)
  if body then
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
    return {id, body}
  end
  redis.call('ZREM', KEYS[1], id)
end
return nil
