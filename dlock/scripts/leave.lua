-- leave: a waiter gives up. If a hand-off made it the holder meanwhile, pass the lock on.
-- ARGV: 1 owner, 2 queue member, 3 claim ms, 4 publish command
-- Returns {next owner, its token, its lease ms} when the lock was passed on to a waiter, else {}.
local owner = ARGV[1]
local L = lib()
L.dequeue(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'o', 't')
local releaser
if cur[1] == owner then
  releaser = owner -- handed to this waiter, which never used it: it has its first hold only
elseif cur[1] and cur[1] ~= '' then
  return {}
end
local next_owner, t, lease = L.hand_off(cur[2], tonumber(ARGV[3]), ARGV[4], releaser)
if next_owner then
  return {next_owner, t, lease}
end
if releaser then
  redis.call('HSET', KEYS[1], 'o', '', 'r', owner, 'h', '0', 'w', '0')
end
return {}
