-- One admission of one request, on Redis time (issue 17). The policy's
-- numbers are rendered above this line (see prelude.lua).
-- KEYS[1] the tenant's state hash, then the admission's lease sets
-- (in-flight caps) and rolling windows, told apart by name.
-- ARGV: the lease member, token ('1': take one, '0': reserved already),
--       the route's dark field, and the window member when there are
--       windows. The lease member may be that of this replica's admission
--       that ended last: taking it again ends that lease (its release needs
--       no round trip of its own), and an answer that takes nothing ends it.
-- Answers an integer, 4 * wait + kind:
--   kind 0: go in `wait` µs (at most the grace): leases taken, token and
--           windows reserved;
--   kind 1: windows reserved `wait` µs ahead, nothing else taken: come back
--           then without the windows;
--   kind 2: windows and token reserved `wait` µs ahead, no lease taken: come
--           back then for the leases alone;
--   kind 3: an in-flight cap is full, nothing taken: ask again (`wait`: the
--           first lease to end);
-- or {left, mark}: another replica saw the route dark, for `left` µs more;
-- nothing taken.
-- Leases are taken only for a request that goes now: a caller whose slot is
-- ahead holds no in-flight slot while it sleeps, so the in-flight caps never
-- make callers of one replica poll against another's sleepers, and the
-- rate's order is the order of arrival at this script, whichever replica.
-- Trimming is the heartbeat's (renew.lua): counts are of live members only.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local member = ARGV[1]
local token = ARGV[2] == '1'
local s, names = read(ARGV[3])
local writes = {}
local function unlease()
  for i = 2, #KEYS do
    if caps[names[i]] then redis.call('ZADD', KEYS[i], 'XX', now, member) end
  end
end
local dark = s[3]
if dark then
  local left, mark = dark_left(dark, now)
  if left then
    unlease()
    return {left, mark}
  end
end
local at = now
if s[1] and s[1] + 0 > at then at = s[1] + 0 end
-- Exact rolling windows: served in arrival order (never before the newest
-- reservation), and at most `limit` in any `window`: a slot frees one window
-- after the limit-th newest reservation (older members, not trimmed yet,
-- are older than that one). A window found empty may be new: `fresh`.
local fresh = {}
for i = 2, #KEYS do
  local limit = limits[names[i]]
  if limit then
    local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    if newest[2] then
      if newest[2] + 0 > at then at = newest[2] + 0 end
      local nth = redis.call('ZRANGE', KEYS[i], -limit, -limit, 'WITHSCORES')
      if nth[2] and nth[2] + window > at then at = nth[2] + window end
    else
      fresh[i] = true
    end
  end
end
local function reserve_windows()
  for i = 2, #KEYS do
    if limits[names[i]] then
      redis.call('ZADD', KEYS[i], at, ARGV[4])
      keep(writes, s, names, i, at + window, fresh[i])
    end
  end
end
-- A window slot or the end of a pause further ahead than the horizon is
-- reserved alone: the caller holds no lease and no token while it waits,
-- and comes back for them at its instant.
if at - now > horizon then
  unlease()
  reserve_windows()
  finish(writes, s, names, now)
  return (at - now) * 4 + 1
end
-- The token bucket as a GCRA: a token at `at` once `at` >= tat - tolerance.
local tat = (s[2] or 0) + 0
if token and tat - tolerance > at then at = tat - tolerance end
local function reserve_token()
  if not token then return end
  if tat < at then tat = at end
  writes[#writes + 1] = 'tat'
  writes[#writes + 1] = tat + interval
  keep(writes, s, names, 1, tat + interval)
end
-- A slot further ahead than the grace (a token behind a queue of waiters,
-- a window slot or a pause within the horizon) is reserved with the token
-- and no lease taken: waiters hold no in-flight slot while they wait, and
-- are served in the order they asked, whichever replica they are on.
if at - now > grace then
  unlease()
  reserve_windows()
  reserve_token()
  finish(writes, s, names, now)
  return (at - now) * 4 + 2
end
-- The in-flight caps count the live leases; the member's own (an ended
-- admission's, taken again here) is not one of them. A set found without
-- live leases may be new: `fresh`.
for i = 2, #KEYS do
  local cap = caps[names[i]]
  if cap then
    local live = redis.call('ZCOUNT', KEYS[i], now + 1, '+inf')
    if live >= cap then
      local own = redis.call('ZSCORE', KEYS[i], member)
      if own and own + 0 > now then live = live - 1 end
    end
    if live >= cap then
      unlease()
      local first = redis.call('ZRANGEBYSCORE', KEYS[i], now + 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      return (first[2] - now) * 4 + 3
    end
    fresh[i] = live == 0
  end
end
for i = 2, #KEYS do
  if caps[names[i]] then
    redis.call('ZADD', KEYS[i], now + lease, member)
    keep(writes, s, names, i, now + lease, fresh[i])
  end
end
reserve_token()
reserve_windows()
finish(writes, s, names, now)
return (at - now) * 4
