-- One admission of one request, on Redis time (issue 17).
-- KEYS[1] pause instant, KEYS[2] the token bucket's theoretical arrival time,
-- KEYS[3] the route's dark mark, then `nl` lease sets (in-flight caps), then
-- `nw` rolling windows.
-- ARGV: member, lease_us, interval_us, tolerance_us, window_us, horizon_us,
--       token (1: take one, 0: reserved already), grace_us, nl, caps..., nw,
--       limits...
-- Every instant is in microseconds of Redis time; numbers written back are
-- formatted with %.0f (Lua would round them to 14 digits).
-- Answers {0, wait, ''}: go in `wait` µs (at most the grace), leases taken,
--                        token and windows reserved;
--         {1, wait, ''}: windows reserved `wait` µs ahead, nothing else taken:
--                        come back then without the windows;
--         {4, wait, ''}: windows and token reserved `wait` µs ahead, no lease
--                        taken: come back then for the leases alone;
--         {2, wait, ''}: an in-flight cap is full, nothing taken: ask again;
--         {3, left, mark}: another replica saw the route dark, for `left` µs
--                        more; nothing taken.
-- Leases are taken only for a request that goes now: a caller whose slot is
-- ahead holds no in-flight slot while it sleeps, so the in-flight caps never
-- make callers of one replica poll against another's sleepers, and the
-- rate's order is the order of arrival at this script, whichever replica.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local member = ARGV[1]
local lease = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local tolerance = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local horizon = tonumber(ARGV[6])
local token = ARGV[7] == '1'
local grace = tonumber(ARGV[8])
local nl = tonumber(ARGV[9])
local nw = tonumber(ARGV[10 + nl])
local function num(x) return string.format('%.0f', x) end
local function ms(us) return math.ceil(us / 1000) end

local left = redis.call('PTTL', KEYS[3])
if left > 0 then
  return {3, left * 1000, redis.call('GET', KEYS[3])}
end
local at = now
local pause = tonumber(redis.call('GET', KEYS[1]) or '0')
if pause > at then at = pause end
-- Exact rolling windows: served in arrival order (never before the newest
-- reservation), and at most `limit` in any `window`: a slot frees one window
-- after the limit-th newest reservation.
for i = 1, nw do
  local key = KEYS[3 + nl + i]
  local limit = tonumber(ARGV[10 + nl + i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - window))
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > at then at = tonumber(newest[2]) end
  local nth = redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
  if nth[2] and tonumber(nth[2]) + window > at then at = tonumber(nth[2]) + window end
end
local function reserve_windows()
  for i = 1, nw do
    local key = KEYS[3 + nl + i]
    redis.call('ZADD', key, num(at), member)
    redis.call('PEXPIRE', key, ms(at - now + window) + 1000)
  end
end
-- A window slot or the end of a pause further ahead than the horizon is
-- reserved alone: the caller holds no lease and no token while it waits,
-- and comes back for them at its instant.
if at - now > horizon then
  reserve_windows()
  return {1, at - now, ''}
end
-- The token bucket as a GCRA: a token at `at` once `at` >= tat - tolerance.
local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
if token and tat - tolerance > at then at = tat - tolerance end
local function reserve_token()
  if not token then return end
  if tat < at then tat = at end
  redis.call('SET', KEYS[2], num(tat + interval), 'PX', ms(tat + interval - now) + 1000)
end
-- A slot further ahead than the grace (a token behind a queue of waiters,
-- a window slot or a pause within the horizon) is reserved with the token
-- and no lease taken: waiters hold no in-flight slot while they wait, and
-- are served in the order they asked, whichever replica they are on.
if at - now > grace then
  reserve_windows()
  reserve_token()
  return {4, at - now, ''}
end
for i = 1, nl do
  local key = KEYS[3 + i]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
  if redis.call('ZCARD', key) >= tonumber(ARGV[9 + i]) then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {2, tonumber(first[2]) - now, ''}
  end
end
for i = 1, nl do
  local key = KEYS[3 + i]
  redis.call('ZADD', key, num(now + lease), member)
  redis.call('PEXPIRE', key, ms(lease) * 2)
end
reserve_token()
reserve_windows()
return {0, at - now, ''}
