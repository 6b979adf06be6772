-- Shared prelude, prepended to every script that changes a lock.
--
-- KEYS (same order in every script that includes this prelude):
--   1 lock    hash   o = owner id ('' when free), t = fencing token (the last one when free),
--                    r = the last full releases (retry tombstones), newest first: the last 12
--                    characters of each owner id (48 random bits), as many as fit in 64 bytes
--                    (5; scripts before kept the last owner id whole), h = number of holds,
--                    e<n> = one field per re-entry hold (n >= 2; the first hold has none),
--                    x = set when the first hold was released while re-entry holds remain,
--                    w = '1' when the line may have waiters (set by every script that adds one
--                    or grants the lock from the line; '0' once a release found the line empty),
--                    g = the owner ids of the last 8 acquisitions that gave up (see leave.lua)
--   2 queue   zset   waiters in arrival order, member "<owner>:<ttl ms>:<skip flag>", score = arrival (us)
--   3 qdead   zset   same members, score = liveness deadline (ms); waiters refresh it while they wait
--   4 record  string completion record stored by Complete
-- All keys share one hash tag, so a script touches a single Redis Cluster slot. A full release
-- keeps the lock hash, without owner, until its lease would have ended: its last token is the
-- base of the next holder's, and r answers a retried release (also after the lock went on to
-- others who released it in turn before the retry came).
--
-- A released lock (hash present, owner '') never has waiters: every script that frees a lock
-- hands it to the first live waiter or empties the line, and a waiter only joins the line of a
-- held lock. A lock hash whose w is not '1' has nobody in line either. The common paths (a
-- free lock taken, a lock released with nobody in line) are written out in each script and
-- never look at the line. Nothing of this prelude runs on them: it only defines lib(), which
-- builds the helpers of the other paths when one is taken (every function a script defines
-- is made anew on each call, and costs Redis time on each call).

local function lib()
  local L = {}

  -- now_us is the server time in microseconds.
  function L.now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end

  -- next_token returns the token after last (the lock hash's t, nil when the hash does not
  -- exist): the server time in microseconds, or last + 1 if that is not above last. Tokens thus
  -- follow the clock (each grant is a script of its own, over a microsecond long), and a
  -- replica promoted after missing the last grants, whose hash still holds an older t, gives a
  -- token above the lost ones as long as its clock is not behind the old master's. now, when
  -- given, is a now_us() the script read already: one TIME call per script is enough.
  function L.next_token(last, now)
    now = now or L.now_us()
    if last and tonumber(last) >= now then
      return tonumber(last) + 1
    end
    return now
  end

  -- ours reports whether owner (an owner id, or false for none) starts with mine, the owner-id
  -- prefix of the calling client ('' or nil: the client gave none). That client tells its own
  -- waiters of a hand-off: no message is published for them.
  function L.ours(owner, mine)
    return owner and mine and mine ~= '' and string.sub(owner, 1, #mine) == mine
  end

  function L.dequeue(member)
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZREM', KEYS[3], member)
  end

  -- head returns the first live waiter, taking dead ones (no liveness refresh since their
  -- deadline: the process died) out of the line ahead of it; nil when nobody live is in line.
  function L.head(nowms)
    while true do
      local head = redis.call('ZRANGE', KEYS[2], 0, 0)
      if #head == 0 then
        return nil
      end
      local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head[1]))
      if deadline and deadline >= nowms then
        return head[1]
      end
      L.dequeue(head[1])
    end
  end

  -- released returns r after a full release by owner (r: the lock hash's r, nil when it has
  -- none): owner's tail first, then the newest of r that fit in 64 bytes. Redis keeps a hash
  -- whose values are at most 64 bytes compact (a listpack, hash-max-listpack-value): a lock
  -- hash takes 184 bytes so, 656 with 8 whole owner ids in r. The tail of an owner id is its
  -- last 12 characters, 48 random bits: another acquisition's has the same with a chance of
  -- 2^-48. An r the scripts before wrote (one whole owner id, which ends with its tail) is
  -- kept as it is until pushed out. release.lua writes this out: its common path builds no
  -- lib.
  function L.released(owner, r)
    local tail = string.sub(owner, -12)
    if not r then
      return tail
    end
    r = tail .. ' ' .. r
    if #r > 64 then
      r = string.match(string.sub(r, 1, 65), '^(.*) ')
    end
    return r
  end

  -- grant makes owner the holder with one hold and marks the line as possibly not empty (w),
  -- so that the release looks at it. A lease below the owner's ttl awaits confirmation.
  -- released, when given, is written as r (see L.released) in the same write: a full
  -- release handed the lock on. Returns the token as written.
  function L.grant(owner, token, lease, released)
    local t = string.format('%.0f', token)
    if released then
      redis.call('HSET', KEYS[1], 'o', owner, 't', t, 'h', '1', 'w', '1', 'r', released)
    else
      redis.call('HSET', KEYS[1], 'o', owner, 't', t, 'h', '1', 'w', '1')
    end
    redis.call('PEXPIRE', KEYS[1], lease)
    return t
  end

  -- hand_off gives a free lock (last token: last) to the first live waiter and tells it so
  -- with one message "<owner> <token> <lease ms>" on the lock's channel, unless the waiter is
  -- one of the calling client's (see ours): that client tells it, sooner than a message
  -- would. The new holder gets
  -- min(its ttl, claim) until it renews, so a waiter that died after its last heartbeat blocks
  -- the line for at most claim; the message carries that lease, because the claim is the
  -- releasing client's setting, not the waiter's. A waiter that asked to skip completed work
  -- is told "<owner> 0" (look again) when a record exists, and the next waiter is considered.
  -- Waiters are taken off the head of the line as they are considered; dead ones are dropped.
  -- released, when given, is the lock hash's r after the full release that frees the lock
  -- (see L.released), written with the new holder.
  -- Returns the new holder, its token and its lease; or nil, having written nothing to the
  -- lock hash: the caller then records the lock as free.
  function L.hand_off(last, claim, pubcmd, released, mine)
    local channel, nowus, nowms
    while true do
      local head = redis.call('ZPOPMIN', KEYS[2])
      if #head == 0 then
        return nil
      end
      local m = head[1]
      local deadline = tonumber(redis.call('ZSCORE', KEYS[3], m))
      redis.call('ZREM', KEYS[3], m)
      if not nowms then
        nowus = L.now_us()
        nowms = math.floor(nowus / 1000)
        channel = string.sub(KEYS[1], 1, -5) .. 'ch'
      end
      local owner, ttl, flag = string.match(m, '^([^:]+):(%d+):(%d)$')
      if owner and deadline and deadline >= nowms then
        if flag == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
          redis.call(pubcmd, channel, owner .. ' 0')
        else
          local t = L.next_token(last, nowus)
          local lease = math.min(tonumber(ttl), claim)
          local written = L.grant(owner, t, lease, released)
          if not L.ours(owner, mine) then
            redis.call(pubcmd, channel, owner .. ' ' .. written .. ' ' .. lease)
          end
          return owner, t, lease
        end
      end
    end
  end

  return L
end
