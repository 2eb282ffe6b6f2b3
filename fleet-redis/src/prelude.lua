-- What every fleet script shares, after the policy's numbers the store
-- renders above it: lease, interval, tolerance, window, period, horizon, grace,
-- margin, settle (µs), caps and limits (by key name, after the hash tag).
--
-- The tenant's state is one hash, KEYS[1]: `pause` (the pause's end),
-- `tat` (the token bucket's theoretical arrival time), `dark:<route>`
-- ("<end> <mark>"), `run` and `settle` (see `run_of`), and the instant
-- until which each key is known to live: `kept` for the hash itself, the key's name for
-- every other key.
--
-- Every key expires: a script that writes to a key makes sure the key
-- lives at least as long as what it wrote matters (`need`), and then some
-- (`margin`), so that the next writes within the margin need no PEXPIREAT.
-- A key that may have been emptied (and so deleted, and made again without
-- an expiry) is `fresh`: its expiry is set whatever the hash says.

-- The state hash's pause, tat, dark mark of `dark`, each key's kept
-- instant (index i + 3 for KEYS[i]), the run (index #KEYS + 4) and the
-- settle's end (#KEYS + 5); the keys' names by index.
local function read(dark)
  local from = #KEYS[1] - 4
  local fields = {'pause', 'tat', dark, 'kept'}
  local names = {'kept'}
  for i = 2, #KEYS do
    local name = KEYS[i]:sub(from)
    names[i] = name
    fields[i + 3] = name
  end
  fields[#KEYS + 4] = 'run'
  fields[#KEYS + 5] = 'settle'
  return redis.call('HMGET', KEYS[1], unpack(fields)), names
end

-- An instant (µs) as Redis reads it back exactly, for a range's bound.
local function us(x)
  return string.format('%.0f', x)
end

-- Expiries to set once the writes are done (a key written may be new).
local expiries = {}

-- KEYS[i] must live until `need`: noted in `writes` (the hash's fields to
-- set) and `expiries` unless the hash says it does already.
local function keep(writes, s, names, i, need, fresh)
  local kept = s[i + 3]
  if fresh or not kept or kept + 0 < need then
    local until_ = need + margin
    writes[#writes + 1] = names[i]
    writes[#writes + 1] = until_
    expiries[#expiries + 1] = i
    expiries[#expiries + 1] = until_
    s[i + 3] = until_
  end
end

-- Writes the state hash's fields, then sets the expiries noted; the hash
-- itself is kept at least until now (a hash made here has an expiry).
local function finish(writes, s, names, now)
  if #writes == 0 then return end
  keep(writes, s, names, 1, now)
  redis.call('HSET', KEYS[1], unpack(writes))
  for e = 1, #expiries, 2 do
    redis.call('PEXPIREAT', KEYS[expiries[e]], math.ceil(expiries[e + 1] / 1000))
  end
end

-- A dark mark "<end> <mark>": µs left and the mark, or nil once it ended.
local function dark_left(value, now)
  local end_, mark = value:match('^(%d+) (.*)$')
  if end_ and end_ + 0 > now then return end_ - now, mark end
end

-- The run: the Redis-time instant the tenant's state was first written. A
-- Redis that restarted empty has none: the first script after it writes a
-- new one, and each replica, told a run other than the one it knows, books
-- what it sent in the last window again (rebook.lua). When the caller knew
-- a run (`given` not 0: the state was lost, not new), the fleet *settles*
-- for `settle`, the time every live replica takes to hear of the new run:
-- admissions are told to go on at their replica's share meanwhile (booking
-- what they send), not to wait, so the return costs no silence and the
-- windows the lost state held are kept by the shares.
local function run_of(s, writes, names, given, now)
  local at = #KEYS + 4
  if s[at] then return s[at] + 0 end
  writes[#writes + 1] = 'run'
  writes[#writes + 1] = us(now)
  s[at] = us(now)
  if given + 0 ~= 0 then
    writes[#writes + 1] = 'settle'
    writes[#writes + 1] = us(now + settle)
    s[at + 1] = us(now + settle)
  end
  return now
end

-- µs of the settle left at `now`, or nil once it ended.
local function settle_left(s, now)
  local end_ = s[#KEYS + 5]
  if end_ and end_ + 0 > now then return end_ - now end
end
