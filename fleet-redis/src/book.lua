-- A request a degraded replica sent on its own share, booked in the shared
-- budgets when Redis takes the call: a replica that found Redis
-- too slow while the others still reach it must not add its share on top
-- of theirs. Unconditional: it was sent already. It counts at the instant
-- it was sent, not when Redis runs this: a booking that waited in a frozen
-- Redis counts in the windows it was sent in, and in the bucket only if it
-- was sent within the bucket's tolerance of now (an older send cannot be in
-- any rolling second ahead), so a thaw does not bring the whole outage's
-- sends due at once.
-- KEYS[1] the state hash, then the request's lease sets (held until
-- released or one lease passes) and windows, told apart by name.
-- ARGV: member, the run the replica knows, when it was sent (Redis time as
-- the replica reckons it, µs; 0: now). Answers the run (see run_of).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local writes = {}
local run = run_of(s, writes, names, ARGV[2], now)
local sent = ARGV[3] + 0
if sent <= 0 or sent > now then sent = now end
if now - sent <= tolerance + interval then
  local tat = (s[2] or 0) + 0
  if tat < sent then tat = sent end
  writes[#writes + 1] = 'tat'
  writes[#writes + 1] = tat + interval
  keep(writes, s, names, 1, tat + interval)
end
for i = 2, #KEYS do
  local fresh = redis.call('EXISTS', KEYS[i]) == 0
  if caps[names[i]] then
    redis.call('ZADD', KEYS[i], now + lease, ARGV[1])
    keep(writes, s, names, i, now + lease, fresh)
  elseif limits[names[i]] and sent + window > now then
    redis.call('ZADD', KEYS[i], sent, ARGV[1])
    keep(writes, s, names, i, sent + window, fresh)
  end
end
finish(writes, s, names, now)
return run
