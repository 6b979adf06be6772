-- acquire: take the lock, or join the line of waiters.
-- ARGV: 1 owner, 2 ttl ms, 3 wait (0 try, 1 queue), 4 skip completed (0/1), 5 waiter liveness ms,
--       6 claim ms, 7 publish command
-- Returns the token, a bare integer, when a free lock with nobody in line was taken for ttl;
--         {1, token, pttl} obtained otherwise (a retried call, or first in line);
--         {0, pttl} busy;
--         {2, record} a completion record exists and skip completed was asked.
-- Safe to run twice: a retried call finds its own owner id and answers obtained again.
--
-- A released lock (hash present, owner '') never has waiters: every script that frees a lock
-- hands it to the first live waiter or empties the line, and a waiter only joins the line of a
-- held lock. So taking a released lock costs three calls (HMGET, HSET, PEXPIRE); a lock whose
-- hash is gone (new key, lease run out) also needs EXISTS on the line and TIME for its token;
-- skip completed adds EXISTS on the record.
local owner = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'o', 't')
local holder = cur[1]
local free = not holder or holder == ''
if free and (ARGV[4] == '0' or redis.call('EXISTS', KEYS[4]) == 0)
    and (holder == '' or redis.call('EXISTS', KEYS[2]) == 0) then
  local t = next_token(cur[2])
  redis.call('HSET', KEYS[1], 'o', owner, 't', string.format('%.0f', t), 'h', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return t
end

local L = lib()
local ttl, claim = tonumber(ARGV[2]), tonumber(ARGV[6])
local member = owner .. ':' .. ARGV[2] .. ':' .. ARGV[4]

if holder == owner then
  L.dequeue(member)
  return {1, tonumber(cur[2]), redis.call('PTTL', KEYS[1])}
end

if ARGV[4] == '1' then
  local rec = redis.call('GET', KEYS[4])
  if rec then
    L.dequeue(member)
    if free then
      L.hand_off(cur[2], claim, ARGV[7])
    end
    return {2, rec}
  end
end

local queued = redis.call('EXISTS', KEYS[2]) == 1
local nowus = now_us()
if free then
  local first = true
  if queued then
    L.purge(math.floor(nowus / 1000))
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)
    first = #head == 0 or head[1] == member
  end
  -- The lock is free with others in line (its holder's lease ran out): serve the first of
  -- them now. That may be the caller, behind waiters told to look again: it then holds the
  -- claim lease, like any waiter handed the lock. If nobody took it, the line is empty.
  if not first then
    local got, t, lease = L.hand_off(cur[2], claim, ARGV[7])
    if got == owner then
      return {1, t, lease}
    end
    first = got == nil
  end
  if first then
    if queued then
      L.dequeue(member)
    end
    local t = next_token(cur[2])
    L.grant(owner, t, ttl)
    return {1, t, ttl}
  end
end

if ARGV[3] == '1' then
  local live = tonumber(ARGV[5])
  local nowms = math.floor(nowus / 1000)
  redis.call('ZADD', KEYS[2], 'NX', nowus, member)
  redis.call('ZADD', KEYS[3], nowms + live, member)
  redis.call('PEXPIRE', KEYS[2], 2 * live)
  redis.call('PEXPIRE', KEYS[3], 2 * live)
end
return {0, redis.call('PTTL', KEYS[1])}
