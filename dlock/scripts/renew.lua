-- renew: extend many leases in one call (watchdog) or one (Refresh).
-- KEYS: lock hashes. ARGV: owner and ttl ms for each key, in pairs.
-- Returns one integer per key: 1 renewed, 0 not owned by that owner any more. A key that is
-- no hash any more (overwritten by another type) is not owned: pcall keeps its WRONGTYPE from
-- failing the whole call, and with it the renewals of every other lock in it.
local out = {}
for i = 1, #KEYS do
  if redis.pcall('HGET', KEYS[i], 'o') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
