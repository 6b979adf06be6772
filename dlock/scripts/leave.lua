-- leave: a waiter gives up. If a hand-off made it the holder meanwhile, pass the lock on.
-- ARGV: 1 owner, 2 queue member, 3 fence ttl ms, 4 claim ms, 5 publish command
-- Returns {next owner, its token} when the lock was passed on to a waiter, else {}.
local owner = ARGV[1]
local L = lib()
L.dequeue(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'o', 't')
if cur[1] == owner then
  L.free(owner, tonumber(ARGV[3]))
elseif cur[1] and cur[1] ~= '' then
  return {}
end
local next_owner, t = L.hand_off(cur[2], tonumber(ARGV[4]), ARGV[5])
if next_owner then
  return {next_owner, t}
end
return {}
