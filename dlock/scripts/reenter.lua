-- reenter: add a hold for an owner that already has the lock.
-- KEYS: 1 lock, 2 record. ARGV: 1 owner, 2 entry (n >= 2), 3 skip completed (0/1).
-- Returns the number of holds; -1 when the caller no longer owns the lock; {0, record} when
-- skip completed was asked and a completion record exists (no hold is added then).
-- Safe to run twice: each re-entry hold is its own field, counted only when it is added.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return -1
end
if ARGV[3] == '1' then
  local rec = redis.call('GET', KEYS[2])
  if rec then
    return {0, rec}
  end
end
if redis.call('HSETNX', KEYS[1], 'e' .. ARGV[2], '1') == 1 then
  return redis.call('HINCRBY', KEYS[1], 'h', 1)
end
return tonumber(redis.call('HGET', KEYS[1], 'h'))
