-- One admission of one request, on Redis time. The policy's
-- numbers are rendered above this line (see prelude.lua).
-- KEYS[1] the tenant's state hash, then the admission's lease sets
-- (in-flight caps) and rolling windows, told apart by name.
-- ARGV: the lease member, token ('1': take one, '0': reserved already),
--       the route's dark field, the run the caller knows (0: none), the
--       Redis-time instant after which its caller gave up (0: none), '1'
--       when its replica just came back from its share (no burst is free),
--       and when there are windows, the window member and '1' when an earlier
--       round trip reserved it ('0': reserve it now). The lease member may
--       be that of this replica's admission that ended last: taking it
--       again ends that lease (its release needs no round trip of its own),
--       and an answer that takes nothing ends it.
-- Answers an integer, 4 * wait + kind:
--   kind 0: go in `wait` µs (at most the grace): leases taken, token and
--           windows reserved;
--   kind 1: windows reserved `wait` µs ahead, nothing else taken: come back
--           then with them reserved;
--   kind 2: windows and token reserved `wait` µs ahead, no lease taken: come
--           back then for the leases alone;
--   kind 3: an in-flight cap is full, nothing taken: ask again (`wait`: the
--           first lease to end);
-- or {left, mark}: another replica saw the route dark, for `left` µs more;
-- or {'settle', left}: the fleet settles after a lost state (see run_of)
-- for `left` µs more: nothing taken, go on at the replica's share;
-- or {run}: the state's run is not the caller's (see run_of); nothing taken.
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
-- An admission Redis runs after its caller gave up (it waited in a frozen
-- Redis) takes nothing: kind 3 with no wait.
local until_ = ARGV[5] + 0
if until_ > 0 and now > until_ then
  unlease()
  return 3
end
local run = run_of(s, writes, names, ARGV[4], now)
if run ~= ARGV[4] + 0 then
  unlease()
  finish(writes, s, names, now)
  return {run}
end
local settling = settle_left(s, now)
if settling then
  unlease()
  return {'settle', settling}
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
-- A window slot reserved on an earlier round trip is where this request
-- stands: it goes no earlier. One lost (a Redis that restarted) is
-- reserved again.
local slot = ARGV[7]
local reserved = ARGV[8] == '1'
local own = {}
if reserved then
  for i = 2, #KEYS do
    if limits[names[i]] then
      local score = redis.call('ZSCORE', KEYS[i], slot)
      if not score then
        reserved = false
        break
      end
      own[i] = score + 0
      if own[i] > at then at = own[i] end
    end
  end
end
-- Exact rolling windows: served in arrival order (never before the newest
-- reservation), and at most `limit` in any `window`: a slot frees one window
-- after the limit-th newest reservation (older members, not trimmed yet,
-- are older than that one). A window found empty may be new: `fresh`.
local fresh = {}
if not reserved then
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
end
local function reserve_windows()
  if reserved then return end
  for i = 2, #KEYS do
    if limits[names[i]] then
      redis.call('ZADD', KEYS[i], at, slot)
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
-- A replica that just came back from its share finds no burst free: the
-- fleet has sent at its shares' rate until now, and the last second of it
-- is still at the platform.
local tat = (s[2] or 0) + 0
if ARGV[6] == '1' and tat < now + tolerance then tat = now + tolerance end
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
-- A window counts a request from when it goes, as the platform does: one
-- that reserved its slot earlier and goes later (it waited for a token or
-- a lease) goes only while the window ending now holds fewer than `limit`
-- others, else comes back when enough of them leave it. Every request
-- checked so when it goes, with each one gone before it at its instant,
-- keeps every window at the platform within the limit.
if reserved then
  for i = 2, #KEYS do
    local limit = limits[names[i]]
    if limit then
      local from = '(' .. us(at - window)
      local count = redis.call('ZCOUNT', KEYS[i], from, us(at))
      if own[i] > at - window then count = count - 1 end
      if count >= limit then
        local k = count - limit + 1
        local older = redis.call('ZRANGEBYSCORE', KEYS[i], from, us(at), 'WITHSCORES', 'LIMIT', 0, k + 1)
        local free, seen = at + window, 0
        for j = 1, #older, 2 do
          if older[j] ~= slot then
            seen = seen + 1
            if seen == k then
              free = older[j + 1] + window
              break
            end
          end
        end
        unlease()
        finish(writes, s, names, now)
        return (free - now) * 4 + 1
      end
    end
  end
end
-- The in-flight caps count the live leases; the member's own (an ended
-- admission's, taken again here) is not one of them. A set found without
-- live leases may be new: `fresh`.
for i = 2, #KEYS do
  local cap = caps[names[i]]
  if cap then
    local live = redis.call('ZCOUNT', KEYS[i], now + 1, '+inf')
    if live >= cap then
      local own_lease = redis.call('ZSCORE', KEYS[i], member)
      if own_lease and own_lease + 0 > now then live = live - 1 end
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
-- A slot reserved earlier is moved to when its request goes.
if reserved then
  for i = 2, #KEYS do
    if own[i] and at > own[i] then
      redis.call('ZADD', KEYS[i], 'XX', us(at), slot)
      keep(writes, s, names, i, at + window)
    end
  end
end
reserve_token()
reserve_windows()
finish(writes, s, names, now)
return (at - now) * 4
