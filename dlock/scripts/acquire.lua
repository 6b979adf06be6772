-- acquire: take the lock, or join the line of waiters.
-- ARGV: 1 owner, 2 ttl ms, 3 wait (0 try, 1 queue), 4 waiter liveness ms, 5 skip completed (0/1),
--       6 queue member, 7 claim ms, 8 channel, 9 publish command
-- Returns {1, token, pttl} obtained; {0, pttl} busy (pttl -2 when free but others are first);
--         {2, record} a completion record exists and skip completed was asked.
-- Safe to run twice: a retried call finds its own owner id and answers obtained again.
-- A free lock with nobody in line costs six calls: HGET, EXISTS, TIME, HGET, HSET, PEXPIRE.
local owner, ttl, member = ARGV[1], tonumber(ARGV[2]), ARGV[6]
local claim = tonumber(ARGV[7])

local holder = redis.call('HGET', KEYS[1], 'o')
if holder == owner then
  dequeue(member)
  return {1, tonumber(redis.call('HGET', KEYS[1], 't')), redis.call('PTTL', KEYS[1])}
end

if ARGV[5] == '1' then
  local rec = redis.call('GET', KEYS[5])
  if rec then
    dequeue(member)
    if not holder then
      hand_off(now_us(), claim, ARGV[8], ARGV[9])
    end
    return {2, rec}
  end
end

local queued = redis.call('EXISTS', KEYS[2]) == 1
local nowus = now_us()
if not holder then
  local first = true
  if queued then
    purge(math.floor(nowus / 1000))
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)
    first = #head == 0 or head[1] == member
  end
  if first then
    if queued then
      dequeue(member)
    end
    local t = next_token(nowus)
    grant(owner, t, ttl)
    return {1, t, ttl}
  end
  -- The lock expired with waiters in line: serve the first of them now.
  hand_off(nowus, claim, ARGV[8], ARGV[9])
end

if ARGV[3] == '1' then
  local live = tonumber(ARGV[4])
  local nowms = math.floor(nowus / 1000)
  redis.call('ZADD', KEYS[2], 'NX', nowus, member)
  redis.call('ZADD', KEYS[3], nowms + live, member)
  redis.call('PEXPIRE', KEYS[2], 2 * live)
  redis.call('PEXPIRE', KEYS[3], 2 * live)
end
return {0, redis.call('PTTL', KEYS[1])}
