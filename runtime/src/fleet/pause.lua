-- A Retry-After seen by one replica pauses every replica (issue 17): the
-- pause lasts until the latest instant any of them was told, in Redis time.
-- KEYS[1] the pause instant; ARGV[1] the wait in µs.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if now + wait > current then
  redis.call('SET', KEYS[1], string.format('%.0f', now + wait), 'PX', math.ceil(wait / 1000) + 1000)
end
return 1
