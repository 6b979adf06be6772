-- reenter: add a hold for an owner that already has the lock.
-- KEYS: 1 lock. ARGV: 1 owner, 2 entry.
-- Returns the number of holds, or -1 when the caller no longer owns the lock.
-- Safe to run twice: each hold is its own field, so a retried call does not count twice.
local cur = redis.call('HMGET', KEYS[1], 'o', 'r')
if cur[1] ~= ARGV[1] then
  return -1
end
redis.call('HSETNX', KEYS[1], 'e' .. ARGV[2], '1')
-- Fields besides the holds: o, t and, after an earlier release, r.
local n = redis.call('HLEN', KEYS[1]) - 2
if cur[2] then
  n = n - 1
end
return n
