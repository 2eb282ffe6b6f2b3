-- Ends the leases of this replica's admissions that ended, when
-- no admission of its own took their members again first.
-- KEYS the lease sets; ARGV the members. Scored `now`: no longer counted,
-- trimmed by the heartbeat. XX: a member (or set) not there is not made.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local ended = {'XX'}
for a = 1, #ARGV do
  ended[#ended + 1] = now
  ended[#ended + 1] = ARGV[a]
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], unpack(ended))
end
return 1
