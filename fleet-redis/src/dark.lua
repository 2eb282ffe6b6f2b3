-- A route answered dark to one replica (T13): dark for every replica for
-- the same time.
-- KEYS[1] the state hash; ARGV: the route's dark field, the mark, for how
-- long (µs). The field holds "<end> <mark>"; a mark that ended is no
-- longer read, and the heartbeat removes it.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local end_ = now + ARGV[3]
local writes = {ARGV[1], string.format('%.0f %s', end_, ARGV[2])}
keep(writes, s, names, 1, end_)
finish(writes, s, names, now)
return 1
