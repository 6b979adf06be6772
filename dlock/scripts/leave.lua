-- leave: an acquisition gives up (its wait ended, or a look failed and may have run all the
-- same). If a hand-off or that look made it the holder, pass the lock on.
-- ARGV: 1 owner, 2 queue member, 3 claim ms, 4 publish command, 5 the acquisition's ttl ms
-- Returns {next owner, its token, its lease ms} when the lock was passed on to a waiter, else {}.
--
-- The owner is recorded as gone (g: the owner ids of the last 8 acquisitions that gave up,
-- newest first), so that a look of its still on its way (sent before the caller gave up at
-- its deadline, or a copy that go-redis sent again) neither takes the lock nor joins the line
-- when it comes in after this script: acquire.lua refuses it. A lock hash that does not exist
-- is made for it, and a free one (released, or handed to this owner and freed below) is kept,
-- for the time a lock taken by that look would have been held. The hash of a lock someone
-- else holds keeps that holder's lease: a look that comes in after it ran out takes the lock.
local owner = ARGV[1]
local L = lib()
L.dequeue(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'o', 't', 'g', 'r')
local gone, n = owner, 1
for id in string.gmatch(cur[3] or '', '%S+') do
  if n == 8 then
    break
  end
  gone, n = gone .. ' ' .. id, n + 1
end
redis.call('HSET', KEYS[1], 'g', gone)
-- The record's time is only ever lengthened: a hash made by an earlier leave holds that one's
-- record too (a just-made hash has no expiry: PTTL -1).
if ((not cur[1] and not cur[2]) or cur[1] == '' or cur[1] == owner)
    and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
local released
if cur[1] == owner then
  -- handed to this waiter, which never used it: it has its first hold only
  released = L.released(owner, cur[4])
elseif cur[1] and cur[1] ~= '' then
  return {}
end
local next_owner, t, lease = L.hand_off(cur[2], tonumber(ARGV[3]), ARGV[4], released)
if next_owner then
  return {next_owner, t, lease}
end
if released then
  redis.call('HSET', KEYS[1], 'o', '', 'r', released, 'h', '0', 'w', '0')
end
return {}
