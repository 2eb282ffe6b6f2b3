-- A request a degraded replica sent on its own share, booked in the shared
-- budgets when Redis takes the call (issue 17): a replica that found Redis
-- too slow while the others still reach it must not add its share on top
-- of theirs. Unconditional: it was sent already.
-- KEYS[1] the token bucket's theoretical arrival time, then `nl` lease sets
-- (held until released or one lease passes), then the windows.
-- ARGV: member, interval_us, window_us, lease_us, nl.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local nl = tonumber(ARGV[5])
local function num(x) return string.format('%.0f', x) end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
redis.call('SET', KEYS[1], num(tat + interval), 'PX', math.ceil((tat + interval - now) / 1000) + 1000)
for k = 2, 1 + nl do
  redis.call('ZADD', KEYS[k], num(now + lease), ARGV[1])
  redis.call('PEXPIRE', KEYS[k], math.ceil(lease / 1000) * 2)
end
for k = 2 + nl, #KEYS do
  redis.call('ZADD', KEYS[k], num(now), ARGV[1])
  redis.call('PEXPIRE', KEYS[k], math.ceil(window / 1000) + 1000)
end
return 1
