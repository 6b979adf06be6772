-- renew: extend many leases in one call (watchdog) or one (Refresh).
-- KEYS: lock hashes. ARGV: owner and ttl ms for each key, in pairs.
-- Returns one integer per key: 1 renewed, 0 not owned by that owner any more.
local out = {}
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'o') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
