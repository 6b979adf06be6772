-- Shared prelude, prepended to every script that changes a lock.
--
-- KEYS (same order in every script that includes this prelude):
--   1 lock    hash   o = owner id ('' when free), t = fencing token (the last one when free),
--                    r = owner of the last full release (retry tombstone), h = number of holds,
--                    e<n> = one field per re-entry hold (n >= 2; the first hold has none),
--                    x = set when the first hold was released while re-entry holds remain
--   2 queue   zset   waiters in arrival order, member "<owner>:<ttl ms>:<skip flag>", score = arrival (us)
--   3 qdead   zset   same members, score = liveness deadline (ms); waiters refresh it while they wait
--   4 record  string completion record stored by Complete
-- All keys share one hash tag, so a script touches a single Redis Cluster slot. A full release
-- keeps the lock hash, without owner, until its lease would have ended: its last token is the
-- base of the next holder's, and r answers a retried release.
--
-- The common paths (a free lock taken, a lock released with nobody in line) are written out in
-- each script; the helpers of the other paths are only built, by lib(), when one is taken.

-- now_us is the server time in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- next_token returns the token after last (the lock hash's t): last + 1, or the server time in
-- microseconds when the hash does not exist (first use, lease expired, data lost). A chain of
-- tokens started from the clock stays behind it (each grant is a script of its own, over a
-- microsecond long), so a token is above every earlier one of its key as long as the server
-- clock does not step back.
local function next_token(last)
  if last then
    return tonumber(last) + 1
  end
  return now_us()
end

local function lib()
  local L = {}

  -- grant makes owner the holder with one hold; a lease below its ttl awaits confirmation.
  function L.grant(owner, token, lease)
    redis.call('HSET', KEYS[1], 'o', owner, 't', string.format('%.0f', token), 'h', '1')
    redis.call('PEXPIRE', KEYS[1], lease)
  end

  -- Waiters that stopped refreshing their deadline (process died) leave the line.
  function L.purge(nowms)
    local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. nowms)
    for i = 1, #dead do
      redis.call('ZREM', KEYS[2], dead[i])
    end
    if #dead > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. nowms)
    end
  end

  function L.dequeue(member)
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZREM', KEYS[3], member)
  end

  -- hand_off gives a free lock (last token: last) to the first live waiter and tells it so
  -- with one message "<owner> <token> <lease ms>" on the lock's channel. The new holder gets
  -- min(its ttl, claim) until it renews, so a waiter that died after its last heartbeat blocks
  -- the line for at most claim; the message carries that lease, because the claim is the
  -- releasing client's setting, not the waiter's. A waiter that asked to skip completed work
  -- is told "<owner> 0" (look again) when a record exists, and the next waiter is considered.
  -- Returns the new holder, its token and its lease, or nil.
  function L.hand_off(last, claim, pubcmd)
    if redis.call('EXISTS', KEYS[2]) == 0 then
      return nil
    end
    local channel = string.sub(KEYS[1], 1, -5) .. 'ch'
    L.purge(math.floor(now_us() / 1000))
    while true do
      local head = redis.call('ZRANGE', KEYS[2], 0, 0)
      if #head == 0 then
        return nil
      end
      local m = head[1]
      L.dequeue(m)
      local owner, ttl, flag = string.match(m, '^([^:]+):(%d+):(%d)$')
      if owner then
        if flag == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
          redis.call(pubcmd, channel, owner .. ' 0')
        else
          local t = next_token(last)
          local lease = math.min(tonumber(ttl), claim)
          L.grant(owner, t, lease)
          redis.call(pubcmd, channel, owner .. ' ' .. string.format('%.0f', t) .. ' ' .. lease)
          return owner, t, lease
        end
      end
    end
  end

  return L
end
