-- What one replica sent in the last window and still holds, booked again
-- into a Redis that lost it (it restarted empty): the fleet's windows and
-- in-flight caps go on from what reached the platform, not from nothing.
-- The bucket is not booked again: the fleet settles on its shares for
-- longer than a rate period (run_of), booking each send as it goes, so
-- by the settle's end the bucket holds every send of the last period, in
-- the order they went (a count booked at once owed a second of sends
-- that already went, and silenced the fleet after the return).
-- KEYS[1] the state hash, then the lease sets it holds leases in and the
-- windows it sent in, told apart by name.
-- ARGV: the run it books into, its replica id, then for each key after
-- the first: n, then n lease members
-- (a lease set) or n ages in µs (a window).
-- Answers the state's run: another than the one given, nothing is booked.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local writes = {}
local run = run_of(s, writes, names, ARGV[1], now)
if run ~= ARGV[1] + 0 then
  finish(writes, s, names, now)
  return run
end
local a = 3
for i = 2, #KEYS do
  local n = ARGV[a] + 0
  local fresh = n > 0 and redis.call('EXISTS', KEYS[i]) == 0
  if n == 0 then
  elseif caps[names[i]] then
    for m = a + 1, a + n do
      redis.call('ZADD', KEYS[i], now + lease, ARGV[m])
    end
    keep(writes, s, names, i, now + lease, fresh)
  elseif limits[names[i]] then
    for m = a + 1, a + n do
      redis.call('ZADD', KEYS[i], us(now - ARGV[m]), ARGV[2] .. ':again:' .. us(run) .. ':' .. (m - a))
    end
    keep(writes, s, names, i, now + window, fresh)
  end
  a = a + 1 + n
end
finish(writes, s, names, now)
return run
