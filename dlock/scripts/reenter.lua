-- reenter: add a hold for an owner that already has the lock.
-- KEYS: 1 lock. ARGV: 1 owner, 2 entry.
-- Returns the number of holds, or -1 when the caller no longer owns the lock.
-- Safe to run twice: each hold is its own field, so a retried call does not count twice.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return -1
end
redis.call('HSETNX', KEYS[1], 'e' .. ARGV[2], '1')
return redis.call('HLEN', KEYS[1]) - 2
