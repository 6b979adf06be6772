-- release: drop one hold; at the last one free the key and hand it to the next waiter.
-- ARGV: 1 owner, 2 entry, 3 store record (0/1), 4 record, 5 record ttl ms, 6 fence ttl ms,
--       7 claim ms, 8 channel, 9 publish command
-- Returns {1, holds left} or {1, 0, next owner, its token} after a hand-off; {-1, 0} when the
-- caller does not own the lock.
-- Safe to run twice: the hold field delete is idempotent, and a full release leaves the owner
-- in the fence hash so that a retried release answers released instead of lost.
-- The last hold with nobody in line costs seven calls: HMGET, HDEL, HLEN, DEL, HSET, PEXPIRE,
-- EXISTS.
local owner = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'o', 't')
if cur[1] ~= owner then
  if redis.call('HGET', KEYS[4], 'r') == owner then
    return {1, 0}
  end
  return {-1, 0}
end
redis.call('HDEL', KEYS[1], 'e' .. ARGV[2])
if ARGV[3] == '1' then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
end
local left = redis.call('HLEN', KEYS[1]) - 2
if left > 0 then
  return {1, left}
end
redis.call('DEL', KEYS[1])
ended(owner, cur[2], tonumber(ARGV[6]))
local next_owner, t = hand_off(now_us(), tonumber(ARGV[7]), ARGV[8], ARGV[9])
if next_owner then
  return {1, 0, next_owner, t}
end
return {1, 0}
