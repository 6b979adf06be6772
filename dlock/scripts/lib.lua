-- Shared prelude, prepended to every state-changing script.
--
-- KEYS (same order in every script that includes this prelude):
--   1 lock    hash   o = owner id, t = fencing token, e<n> = one field per hold
--   2 queue   zset   waiters in arrival order, member "<owner>:<ttl ms>:<flag>", score = arrival (us)
--   3 qdead   zset   same members, score = liveness deadline (ms); waiters refresh it while they wait
--   4 fence   hash   t = last token issued, r = owner of the last full release (retry tombstone)
--   5 record  string completion record stored by Complete
-- All keys share one hash tag, so a script touches a single Redis Cluster slot.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- Tokens are max(last + 1, server time in microseconds), where last is the token of the last
-- release (kept in the fence hash by release). Tokens track the server clock, so a token is
-- above every earlier one also after a lease expired without a release or the fence hash was
-- lost (expired, flushed, restart), as long as the server clock does not step back.
local function next_token(nowus)
  local last = tonumber(redis.call('HGET', KEYS[4], 't') or '0')
  if last >= nowus then
    return last + 1
  end
  return nowus
end

-- ended records a full release in the fence hash: the last token, and the owner, so that a
-- retried release answers released instead of lost.
local function ended(owner, token, fence_ttl)
  redis.call('HSET', KEYS[4], 't', token, 'r', owner)
  redis.call('PEXPIRE', KEYS[4], fence_ttl)
end

local function grant(owner, token, lease)
  redis.call('HSET', KEYS[1], 'o', owner, 't', fmt(token), 'e1', '1')
  redis.call('PEXPIRE', KEYS[1], lease)
end

-- Waiters that stopped refreshing their deadline (process died) leave the line.
local function purge(nowms)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. nowms)
  for i = 1, #dead do
    redis.call('ZREM', KEYS[2], dead[i])
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. nowms)
  end
end

local function dequeue(member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
end

-- hand_off gives a free lock to the first live waiter and tells it so with one message
-- "<owner> <token>". The new holder gets min(its ttl, claim) until it confirms with a renewal,
-- so a waiter that died after its last heartbeat blocks the line for at most claim.
-- A waiter that asked to skip completed work is told "<owner> 0" (look again) when a record
-- exists, and the next waiter is considered. Returns the new holder and its token, or nil.
local function hand_off(nowus, claim, channel, pubcmd)
  if redis.call('EXISTS', KEYS[2]) == 0 then
    return nil
  end
  purge(math.floor(nowus / 1000))
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)
    if #head == 0 then
      return nil
    end
    local m = head[1]
    dequeue(m)
    local owner, ttl, flag = string.match(m, '^([^:]+):(%d+):(%d)$')
    if owner then
      if flag == '1' and redis.call('EXISTS', KEYS[5]) == 1 then
        redis.call(pubcmd, channel, owner .. ' 0')
      else
        local t = next_token(nowus)
        local lease = tonumber(ttl)
        if claim < lease then
          lease = claim
        end
        grant(owner, t, lease)
        redis.call(pubcmd, channel, owner .. ' ' .. fmt(t))
        return owner, t
      end
    end
  end
end
