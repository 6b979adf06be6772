-- release: drop one hold; at the last one free the lock and hand it to the next waiter.
-- ARGV: 1 owner, 2 entry ('1' the first hold, n >= 2 a re-entry), 3 claim ms,
--       4 publish command, 5 the releasing client's owner-id prefix ('' none: a hand-off to
--       a waiter whose id starts with it is not published, the client tells its waiter
--       itself), 6 record and 7 record ttl ms (only when a record is to be stored)
-- Returns 0, a bare integer, after a full release with nobody in line; otherwise {1, holds
-- left}, or {1, 0, next owner, its token, its lease ms} after a hand-off (or after a retried
-- release, when the holder now is a waiter of the releasing client); {-1, 0} when the caller
-- does not own the lock.
-- Safe to run twice: a hold is only counted off once (its field, or x for the first hold, says
-- whether it is gone), and a full release puts the owner first in r, which keeps the last 5
-- full releasers, so that a retried release answers released instead of lost: also when,
-- before the retry came, the lock went to a waiter or another caller who released it in
-- turn (go-redis sends the call again after a network error, up to a read timeout late).
-- The last hold with nobody in line (no w on the lock) costs two calls: HMGET, HSET (and SET
-- for a record).
-- A record stored while holds remain tells the waiters that skip completed work (flag 1) to
-- look again, which finds the record: they need not wait for the outer hold's release.
local owner, entry = ARGV[1], ARGV[2]
local cur = redis.call('HMGET', KEYS[1], 'o', 't', 'r', 'h', 'x', 'w')
if cur[1] ~= owner then
  -- r names the last full releases by the tails of their owner ids (see L.released): a
  -- token of r that ends with the caller's tail is its release. Only an r the scripts before
  -- wrote holds more (a whole owner id).
  local r, tail = cur[3], string.sub(owner, -12) .. ' '
  if r and string.find(r .. ' ', tail, 1, true) then
    -- A retried release (the reply of the first run was lost, and the client sent it
    -- again). If the first run handed the lock to a waiter of the releasing client, it
    -- published nothing: name the holder again, with what is left of its lease, so that the
    -- client tells it (a holder that knows already ignores it). Only while the caller's is
    -- the last full release: a holder that got the lock from a later one was told by it.
    local last = string.sub(string.match(r, '^%S+'), -12) .. ' ' == tail
    if last and lib().ours(cur[1], ARGV[5]) then
      return {1, 0, cur[1], tonumber(cur[2]), redis.call('PTTL', KEYS[1])}
    end
    return {1, 0}
  end
  return {-1, 0}
end
-- Finishing work goes through when Redis is full (maxmemory with noeviction). Redis refuses
-- a script for OOM only at its first write that may grow memory (HSET, SET, HINCRBY), and
-- only while the script has written nothing yet; a write that cannot grow memory (HDEL,
-- ZPOPMIN, ZREM) is allowed when full and counts as a write, so the writes after it are not
-- refused. A release refused would leave the lock held to the end of its lease and lose
-- Complete's record: a retry would run the work again. Each path's first write goes through
-- write, which, when Redis refuses it for OOM, sends an HDEL of a field that never exists
-- (nothing changes, nothing is replicated) and the write again; or it is one of those Redis
-- allows when full: the HDEL of a re-entry hold's field, a hand-off's ZPOPMIN. The HDEL costs
-- a call only when Redis is full.
local wrote = false
local function write(...)
  if wrote then
    return redis.call(...)
  end
  wrote = true
  local res = redis.pcall(...)
  if type(res) == 'table' and res.err then
    if string.sub(res.err, 1, 3) == 'OOM' then
      redis.call('HDEL', KEYS[1], '-')
    end
    -- Goes through after the HDEL; any other error (an ACL refusal) is raised as Redis gives it.
    return redis.call(...)
  end
  return res
end
if ARGV[6] then
  write('SET', KEYS[4], ARGV[6], 'PX', ARGV[7])
end
local function held(holds)
  if ARGV[6] and cur[6] == '1' then
    local channel = string.sub(KEYS[1], 1, -5) .. 'ch'
    for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      local waiter, flag = string.match(m, '^([^:]+):%d+:(%d)$')
      if waiter and flag == '1' then
        redis.call(ARGV[4], channel, waiter .. ' 0')
      end
    end
  end
  return {1, holds}
end
local holds = tonumber(cur[4])
if entry == '1' then
  if cur[5] then
    return held(holds) -- a retry: the first hold is gone already
  end
  if holds > 1 then
    write('HSET', KEYS[1], 'x', '1')
    return held(redis.call('HINCRBY', KEYS[1], 'h', -1))
  end
else
  if redis.call('HDEL', KEYS[1], 'e' .. entry) == 0 then
    return held(holds) -- a retry, or a hold that was never added
  end
  wrote = true
  holds = redis.call('HINCRBY', KEYS[1], 'h', -1)
  if holds > 0 then
    return held(holds)
  end
  if cur[5] then
    redis.call('HDEL', KEYS[1], 'x')
  end
end
-- r after this release (L.released, written out: the common path builds no lib).
local released = string.sub(owner, -12)
if cur[3] then
  released = released .. ' ' .. cur[3]
  if #released > 64 then
    released = string.match(string.sub(released, 1, 65), '^(.*) ')
  end
end
if cur[6] == '1' then
  local next_owner, t, lease = lib().hand_off(cur[2], tonumber(ARGV[3]), ARGV[4], released, ARGV[5])
  if next_owner then
    return {1, 0, next_owner, t, lease}
  end
  redis.call('HSET', KEYS[1], 'o', '', 'r', released, 'h', '0', 'w', '0')
  return {1, 0}
end
write('HSET', KEYS[1], 'o', '', 'r', released, 'h', '0')
return 0
