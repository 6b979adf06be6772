-- leave: a waiter gives up. If a hand-off made it the holder meanwhile, pass the lock on.
-- ARGV: 1 owner, 2 queue member, 3 fence ttl ms, 4 claim ms, 5 channel, 6 publish command
-- Returns 1 when a hand-off was passed on, else 0.
local owner = ARGV[1]
dequeue(ARGV[2])
local holder = redis.call('HGET', KEYS[1], 'o')
local fence_ttl = tonumber(ARGV[3])
if holder == owner then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[4], 'r', owner)
  redis.call('PEXPIRE', KEYS[4], fence_ttl)
  hand_off(now_us(), fence_ttl, tonumber(ARGV[4]), ARGV[5], ARGV[6])
  return 1
end
if not holder then
  hand_off(now_us(), fence_ttl, tonumber(ARGV[4]), ARGV[5], ARGV[6])
end
return 0
