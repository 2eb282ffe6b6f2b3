-- The heartbeat of one replica (issue 17): says it is live for one lease,
-- renews the leases it holds, and answers the live replicas' ids.
-- KEYS[1] the replicas, KEYS[2..] lease sets.
-- ARGV: replica, lease_us, then for each lease set: n, members...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local function num(x) return string.format('%.0f', x) end
local expiry = num(now + lease)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) * 2)
local a = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    redis.call('ZADD', KEYS[k], 'XX', expiry, ARGV[a])
    a = a + 1
  end
  if n > 0 then redis.call('PEXPIRE', KEYS[k], math.ceil(lease / 1000) * 2) end
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
