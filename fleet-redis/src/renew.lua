-- The heartbeat of one replica: says it is live for one lease,
-- renews the leases it holds, answers the live replicas' ids, and keeps the
-- tenant's keys tidy (the admissions do not trim): ended leases, window
-- slots older than one window and dark marks that ended go.
-- KEYS[1] the state hash, KEYS[2] the replicas, then every lease set and
-- every window of the fleet, told apart by name.
-- ARGV: replica, the run it knows (0: none), then for each lease set in
-- KEYS' order: n, members...
-- Answers the run (see run_of), the token bucket's tat less now, Redis's
-- now, the settle left (0: none), then what the fleet sent lately (for
-- each window in KEYS' order: n, then the ages of its n slots, a slot
-- reserved ahead negative), then the live replicas' ids. A replica that goes local starts
-- its windows from these. The state hash lives while any replica beats: its
-- run must outlive a quiet spell.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s, names = read('pause')
local writes = {}
local run = run_of(s, writes, names, ARGV[2], now)
keep(writes, s, names, 1, now + lease)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[2], math.ceil(lease / 1000) * 2)
local a = 3
for i = 3, #KEYS do
  if caps[names[i]] then
    local n = ARGV[a] + 0
    local renewed = false
    for m = a + 1, a + n do
      -- A lease ended meanwhile (given back) stays ended.
      local score = redis.call('ZSCORE', KEYS[i], ARGV[m])
      if score and score + 0 > now then
        redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[m])
        renewed = true
      end
    end
    a = a + 1 + n
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    if renewed then keep(writes, s, names, i, now + lease) end
  elseif limits[names[i]] then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  end
end
local state = redis.call('HGETALL', KEYS[1])
for f = 1, #state, 2 do
  local field = state[f]
  if field:sub(1, 5) == 'dark:' and not dark_left(state[f + 1], now) then
    redis.call('HDEL', KEYS[1], field)
  end
end
finish(writes, s, names, now)
local answer = {us(run), us((s[2] or now) - now), us(now), us(settle_left(s, now) or 0)}
for i = 3, #KEYS do
  if limits[names[i]] then
    local slots = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
    answer[#answer + 1] = tostring(#slots / 2)
    for j = 2, #slots, 2 do
      answer[#answer + 1] = us(now - slots[j])
    end
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  answer[#answer + 1] = id
end
return answer
