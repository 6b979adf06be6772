-- acquire: take the lock, or join the line of waiters.
-- ARGV: 1 owner, 2 ttl ms, 3 wait (0 try, 1 queue), 4 skip completed (0/1), 5 waiter liveness ms,
--       6 claim ms, 7 publish command
-- Returns the token, a bare integer, when a free lock with nobody in line was taken for ttl;
--         {0, -1, 0} without doing anything when the owner gave up already (g, see leave.lua);
--         {1, token, pttl} obtained otherwise (a retried call, or first in line);
--         {0, pttl, token} busy, with the holder's token: a hand-off notice to the caller
--         with a token not above it is stale (the caller was paused past its claim lease);
--         {2, record} a completion record exists and skip completed was asked.
-- Safe to run twice: a retried call finds its own owner id and answers obtained again.
--
-- A released lock never has waiters (see the prelude), so taking one costs four calls (HMGET,
-- TIME for the token, HSET, PEXPIRE); a lock whose hash is gone (new key, lease run out) also
-- needs EXISTS on the line; skip completed looks for the record in the same EXISTS (or in one
-- of its own, for a released lock). Joining the line marks the lock hash (w), so that its
-- holder's release looks at the line.
local owner = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'o', 't', 'w', 'g')
if cur[4] and string.find(cur[4], owner, 1, true) then
  -- This acquisition gave up (leave.lua) before this call, sent earlier, came in: nobody is
  -- there to use a lock or a place in line.
  return {0, -1, 0}
end
local holder = cur[1]
local free = not holder or holder == ''
if free then
  -- In the way of taking it: a record (skip completed), a line (only when the hash is gone).
  local others = 0
  if holder then
    if ARGV[4] == '1' then
      others = redis.call('EXISTS', KEYS[4])
    end
  elseif ARGV[4] == '1' then
    others = redis.call('EXISTS', KEYS[4], KEYS[2])
  else
    others = redis.call('EXISTS', KEYS[2])
  end
  if others == 0 then
    -- next_token (see the prelude), written out. Redis turns a number argument into text
    -- with 17 significant digits: a token (16 digits) is stored as the integer it is.
    local now = redis.call('TIME')
    local t = now[1] * 1000000 + now[2]
    local last = tonumber(cur[2])
    if last and last >= t then
      t = last + 1
    end
    redis.call('HSET', KEYS[1], 'o', owner, 't', t, 'h', '1')
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return t
  end
end

-- The helpers (lib) are built only on the paths that use them: not to join the line of a
-- held lock, the common path of a contended acquisition, which reads the time itself.
local ttl, claim = tonumber(ARGV[2]), tonumber(ARGV[6])
local member = owner .. ':' .. ARGV[2] .. ':' .. ARGV[4]

if holder == owner then
  lib().dequeue(member)
  return {1, tonumber(cur[2]), redis.call('PTTL', KEYS[1])}
end

if ARGV[4] == '1' then
  local rec = redis.call('GET', KEYS[4])
  if rec then
    local L = lib()
    L.dequeue(member)
    if free then
      L.hand_off(cur[2], claim, ARGV[7])
    end
    return {2, rec}
  end
end

local now = redis.call('TIME')
local nowus = now[1] * 1000000 + now[2]
local held_token = cur[2]
if free then
  -- The holder's lease ran out with others in line (a released lock has nobody in line):
  -- serve the first live waiter now. That may be the caller, behind waiters told to look
  -- again: it then holds the claim lease, like any waiter handed the lock. When nobody else
  -- is in line, the caller takes the lock.
  local L = lib()
  local head = L.head(math.floor(nowus / 1000))
  if head and head ~= member then
    local got, t, lease = L.hand_off(cur[2], claim, ARGV[7])
    if got == owner then
      return {1, t, lease}
    end
    if not got then
      head = nil -- nobody live in line: the caller takes the lock
    else
      held_token = t
    end
  end
  if not head or head == member then
    L.dequeue(member)
    local t = L.next_token(cur[2], nowus)
    L.grant(owner, t, ttl)
    return {1, t, ttl}
  end
end

if ARGV[3] == '1' then
  local live = tonumber(ARGV[5])
  local nowms = math.floor(nowus / 1000)
  local function keep_place()
    redis.call('ZADD', KEYS[3], nowms + live, member)
    redis.call('PEXPIRE', KEYS[2], 2 * live)
    redis.call('PEXPIRE', KEYS[3], 2 * live)
  end
  -- A full Redis (maxmemory with noeviction) refuses a script's first write that may grow
  -- memory (OOM); this one is the first unless dead waiters were taken out of line above.
  -- A caller already in line then keeps its place with a new deadline (HDEL, which Redis
  -- allows when full, writes first: see release.lua); a new caller stays out of line and
  -- finds the lock at its next look. The lock is busy either way: a full Redis must not
  -- turn busy into a store error.
  local added = redis.pcall('ZADD', KEYS[2], 'NX', nowus, member)
  if type(added) == 'table' and added.err then
    if string.sub(added.err, 1, 3) ~= 'OOM' then
      return redis.error_reply(added.err)
    end
    if redis.call('ZSCORE', KEYS[3], member) then
      redis.call('HDEL', KEYS[1], '-')
      keep_place()
    end
  else
    keep_place()
    if cur[3] ~= '1' then
      redis.call('HSET', KEYS[1], 'w', '1')
    end
  end
end
return {0, redis.call('PTTL', KEYS[1]), tonumber(held_token) or 0}
