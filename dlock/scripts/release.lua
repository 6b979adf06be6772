-- release: drop one hold; at the last one free the lock and hand it to the next waiter.
-- ARGV: 1 owner, 2 entry, 3 fence ttl ms, 4 claim ms, 5 publish command,
--       6 record and 7 record ttl ms (only when a completion record is to be stored)
-- Returns 0, a bare integer, after a full release with nobody in line; otherwise {1, holds left}
-- or {1, 0, next owner, its token} after a hand-off; {-1, 0} when the caller does not own the lock.
-- Safe to run twice: the hold field delete is idempotent, and a full release leaves the owner
-- in the lock hash (r) so that a retried release answers released instead of lost.
-- The last hold with nobody in line costs six calls: HMGET, HDEL, HLEN, HSET, PEXPIRE, EXISTS.
local owner = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'o', 't', 'r')
if cur[1] ~= owner then
  if cur[3] == owner then
    return {1, 0}
  end
  return {-1, 0}
end
redis.call('HDEL', KEYS[1], 'e' .. ARGV[2])
if ARGV[6] then
  redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[7])
end
-- Fields besides the holds: o, t and, after an earlier release, r.
local left = redis.call('HLEN', KEYS[1]) - 2
if cur[3] then
  left = left - 1
end
if left > 0 then
  return {1, left}
end
redis.call('HSET', KEYS[1], 'o', '', 'r', owner)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
local next_owner, t = lib().hand_off(cur[2], tonumber(ARGV[4]), ARGV[5])
if next_owner then
  return {1, 0, next_owner, t}
end
return {1, 0}
