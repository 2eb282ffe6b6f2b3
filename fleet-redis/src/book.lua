-- A request a degraded replica sent on its own share, booked in the shared
-- budgets when Redis takes the call: a replica that found Redis
-- too slow while the others still reach it must not add its share on top
-- of theirs. Unconditional: it was sent already.
-- KEYS[1] the state hash, then the request's lease sets (held until
-- released or one lease passes) and windows, told apart by name.
-- ARGV: member, the run the replica knows. Answers the run (see run_of).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local writes = {}
local run = run_of(s, writes, names, ARGV[2], now)
local tat = (s[2] or 0) + 0
if tat < now then tat = now end
writes[#writes + 1] = 'tat'
writes[#writes + 1] = tat + interval
keep(writes, s, names, 1, tat + interval)
for i = 2, #KEYS do
  local fresh = redis.call('EXISTS', KEYS[i]) == 0
  if caps[names[i]] then
    redis.call('ZADD', KEYS[i], now + lease, ARGV[1])
    keep(writes, s, names, i, now + lease, fresh)
  elseif limits[names[i]] then
    redis.call('ZADD', KEYS[i], now, ARGV[1])
    keep(writes, s, names, i, now + window, fresh)
  end
end
finish(writes, s, names, now)
return run
