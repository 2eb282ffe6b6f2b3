-- A Retry-After seen by one replica pauses every replica: the
-- pause lasts until the latest instant any of them was told, in Redis time.
-- KEYS[1] the state hash; ARGV[1] the wait in µs.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local end_ = now + ARGV[1]
if not s[1] or s[1] + 0 < end_ then
  local writes = {'pause', end_}
  keep(writes, s, names, 1, end_)
  finish(writes, s, names, now)
end
return 1
