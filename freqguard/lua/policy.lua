-- freqguard policy script: the Lua twin of freqguard/script.py (run) and of the strategy
-- twins in freqguard/strategies/*.py. Each strategy below has the same functions, under the
-- same names and in the same order, as its Python module; change both together.
--
-- KEYS   [1] the record: every state of one partition (recipient) and policy, one key
-- ARGV   [1] now: microseconds, or "" to use the server's TIME
--        [2] cost: integer >= 0 (0: only check)
--        [3] mode: 0 HIT, 1 CHECK, 2 REFUND, 3 RESET
--        [4] number of states, then for each state:
--            strategy code (1 fixed-window, 2 sliding-log, 3 token-bucket, 4 gcra),
--            shadow (0/1), number of rules, then for each rule:
--            capacity, window (µs), interval (µs per token, buckets; else 0), shadow (0/1)
--        then, one per state, its field name in the record (a 2-byte state tag, plus the
--        8-byte digest of its other dimension values when it has any)
-- Reply  {allowed, remaining_1, reset_after_us_1, retry_after_us_1, remaining_2, ...}
--        one triple per rule in plan order; a rule allowed the hit when its retry is 0.
-- Time   the server's TIME unless pinned. All arithmetic on integers below 2^53.
-- Record a sequence of fields, each ">B" name length, name, ">I7I4" expiry (µs) and state
--        length, then the packed state. A field whose expiry has passed no longer matters
--        and is dropped on the next write; the key's TTL is that of its longest-lived field
--        (plus a grace period when time is pinned, see save).

local floor, max, min, ceil = math.floor, math.max, math.min, math.ceil
local pack, unpack, sub, rep = struct.pack, struct.unpack, string.sub, string.rep
local tonumber, ipairs, call = tonumber, ipairs, redis.call
local ARGV, KEYS = ARGV, KEYS

local HIT, CHECK, REFUND, RESET = 0, 1, 2, 3

-- With a pinned clock (tests, replays) the caller's time and the server's expiry clock differ:
-- a key must not expire in real time while it still matters in pinned time, so it gets a
-- grace period on top. With the server's TIME, a key expires when its state stops mattering.
local PINNED_GRACE_MS = 600000
local pinned = ARGV[1] ~= ''

local function save(key, value, ttl_us)
  local ms = max(1, ceil(ttl_us / 1000))
  if pinned then ms = ms + PINNED_GRACE_MS end
  call('SET', key, value, 'PX', ms)
end

-- fixed-window ------------------------------------------------------------------------------
-- state: (window_start, count), stored as ">I7I4"
local function make_fixed_window()
  local fixed_window = {}

  function fixed_window.load(raw, now, spec)
    local start = now - now % spec.rules[1].window
    if raw then
      local stored, count = unpack('>I7I4', raw)
      if stored == start then return {start, count} end
    end
    return {start, 0}
  end

  function fixed_window.check(view, now, need, rule)
    if view[2] + need <= rule.capacity then return 0 end
    return view[1] + rule.window - now
  end

  function fixed_window.consume(view, now, cost, spec)
    return {view[1], view[2] + cost}
  end

  function fixed_window.refund(view, now, cost, spec)
    local count = max(0, view[2] - cost)
    if count == 0 then return nil end
    return {view[1], count}
  end

  function fixed_window.report(view, now, rule)
    if view[2] == 0 then return rule.capacity, 0 end
    return max(0, rule.capacity - view[2]), view[1] + rule.window - now
  end

  function fixed_window.ttl(state, now, spec)
    return state[1] + spec.rules[1].window - now
  end

  function fixed_window.encode(state, spec)
    return pack('>I7I4', state[1], state[2])
  end

  return fixed_window
end

-- sliding-log -------------------------------------------------------------------------------
-- state: ascending timestamps, packed: a header ">BI7" (entry width w, base) and then one
-- w-byte offset from base per entry. The width holds four times the longest window, so the
-- base moves (a rebase re-encodes the entries) only every few windows.
local function make_sliding_log()
  local sliding_log = {}

  local function log_at(view, i)  -- the i-th timestamp (1-based)
    return view.base + unpack(view.fmt, view.raw, 9 + (i - 1) * view.width)
  end

  local function log_after(view, t)  -- the index of the first entry > t (n + 1 if none)
    local lo, hi = 1, view.n + 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if log_at(view, mid) <= t then lo = mid + 1 else hi = mid end
    end
    return lo
  end

  local function log_width(window)
    local w, span = 1, window * 4
    while w < 7 and 256 ^ w <= span do w = w + 1 end
    return w
  end

  function sliding_log.load(raw, now, spec)
    if not raw then
      local width = log_width(spec.window)
      return {raw = nil, n = 0, width = width, base = now, fmt = '>I' .. width}
    end
    local width, base = unpack('>BI7', raw)
    return {raw = raw, n = (#raw - 8) / width, width = width, base = base, fmt = '>I' .. width}
  end

  function sliding_log.check(view, now, need, rule)
    local lo = log_after(view, now - rule.window)
    local count = view.n - lo + 1
    local excess = count + need - rule.capacity
    if excess <= 0 then return 0 end
    if excess > count then  -- more than the rule could ever admit: report when it is empty
      if count > 0 then return max(1, log_at(view, view.n) + rule.window - now) end
      return rule.window
    end
    return log_at(view, lo + excess - 1) + rule.window - now
  end

  -- A state is {raw = packed string, newest = last timestamp}. The usual write appends to and
  -- trims the packed string; only a rebase, or a clock that stepped back, re-encodes entries.
  local function log_pack(width, base, entries)
    local parts, fmt = {pack('>BI7', width, base)}, '>I' .. width
    for i = 1, #entries do parts[i + 1] = pack(fmt, entries[i] - base) end
    return {raw = table.concat(parts), newest = entries[#entries]}
  end

  local function log_entries(view, first, last)
    local out = {}
    for i = first, last do out[#out + 1] = log_at(view, i) end
    return out
  end

  function sliding_log.consume(view, now, cost, spec)
    local lo, n = log_after(view, now - spec.window), view.n
    local width = log_width(spec.window)
    local base = view.base
    if lo > n then base = now end  -- nothing left in the window: restart the base here
    local drop = max(0, n - lo + 1 + cost - spec.cap)  -- the oldest entries beyond the cap
    if (n == 0 or log_at(view, n) <= now) and width == view.width and now - base < 256 ^ width then
      local body = ''
      if lo <= n then body = sub(view.raw, 9 + (lo - 1 + drop) * width, 8 + n * width) end
      local added = rep(pack('>I' .. width, now - base), cost)
      return {raw = pack('>BI7', width, base) .. body .. added, newest = now}
    end
    local at = log_after(view, now)
    local merged = log_entries(view, lo, at - 1)
    for _ = 1, cost do merged[#merged + 1] = now end
    for _, t in ipairs(log_entries(view, at, n)) do merged[#merged + 1] = t end
    local kept = {}
    for i = max(1, #merged - spec.cap + 1), #merged do kept[#kept + 1] = merged[i] end
    return log_pack(width, kept[1], kept)
  end

  function sliding_log.refund(view, now, cost, spec)
    local lo = log_after(view, now - spec.window)
    local last = max(lo, view.n - cost + 1) - 1
    if last < lo then return nil end
    local w = view.width
    local raw = sub(view.raw, 1, 8) .. sub(view.raw, 9 + (lo - 1) * w, 8 + last * w)
    return {raw = raw, newest = log_at(view, last)}
  end

  function sliding_log.report(view, now, rule)
    local count = view.n - log_after(view, now - rule.window) + 1
    if count == 0 then return rule.capacity, 0 end
    return max(0, rule.capacity - count), log_at(view, view.n) + rule.window - now
  end

  function sliding_log.ttl(state, now, spec)
    return state.newest + spec.window - now
  end

  function sliding_log.encode(state, spec)
    return state.raw
  end

  return sliding_log
end

-- token-bucket ------------------------------------------------------------------------------
-- state: (tokens, last), stored as ">I4I7"
local function make_token_bucket()
  local token_bucket = {}

  function token_bucket.load(raw, now, spec)
    local rule = spec.rules[1]
    if not raw then return {rule.capacity, now} end
    local tokens, last = unpack('>I4I7', raw)
    if now > last then
      local earned = floor((now - last) / rule.interval)
      tokens = tokens + earned
      last = last + earned * rule.interval
    end
    if tokens >= rule.capacity then return {rule.capacity, now} end
    return {tokens, last}
  end

  function token_bucket.check(view, now, need, rule)
    if view[1] >= need then return 0 end
    return (need - view[1]) * rule.interval - (now - view[2])
  end

  function token_bucket.consume(view, now, cost, spec)
    return {view[1] - cost, view[2]}
  end

  function token_bucket.refund(view, now, cost, spec)
    local tokens = view[1] + cost
    if tokens >= spec.rules[1].capacity then return nil end
    return {tokens, view[2]}
  end

  function token_bucket.report(view, now, rule)
    if view[1] >= rule.capacity then return rule.capacity, 0 end
    return view[1], (rule.capacity - view[1]) * rule.interval - (now - view[2])
  end

  function token_bucket.ttl(state, now, spec)
    local rule = spec.rules[1]
    return (rule.capacity - state[1]) * rule.interval - (now - state[2])
  end

  function token_bucket.encode(state, spec)
    return pack('>I4I7', state[1], state[2])
  end

  return token_bucket
end

-- gcra --------------------------------------------------------------------------------------
-- state: the theoretical arrival time, stored as a decimal integer (Redis keeps it as an int)
local function make_gcra()
  local gcra = {}

  function gcra.load(raw, now, spec)
    local tat = raw and tonumber(raw)
    if not tat or tat < now then return now end
    return tat
  end

  function gcra.check(tat, now, need, rule)
    local over = tat + need * rule.interval - now - rule.capacity * rule.interval
    if over > 0 then return over end
    return 0
  end

  function gcra.consume(tat, now, cost, spec)
    return tat + cost * spec.rules[1].interval
  end

  function gcra.refund(tat, now, cost, spec)
    tat = tat - cost * spec.rules[1].interval
    if tat > now then return tat end
    return nil
  end

  function gcra.report(tat, now, rule)
    local ahead = tat - now
    return max(0, floor((rule.capacity * rule.interval - ahead) / rule.interval)), ahead
  end

  function gcra.ttl(tat, now, spec)
    return tat - now
  end

  function gcra.encode(tat, spec)
    return string.format('%d', tat)
  end

  return gcra
end

-- the policy script (freqguard/script.py: run) ------------------------------------------------
-- closures cost time on every call: build only the strategies this call uses
local FACTORIES = {make_fixed_window, make_sliding_log, make_token_bucket, make_gcra}
local TWINS = {}
local function twin(code)
  local found = TWINS[code]
  if not found then
    found = FACTORIES[code]()
    TWINS[code] = found
  end
  return found
end

local function plan()
  local specs, at = {}, 5
  for k = 1, tonumber(ARGV[4]) do
    local spec = {twin = twin(tonumber(ARGV[at])), shadow = ARGV[at + 1] == '1', rules = {}}
    local n = tonumber(ARGV[at + 2])
    at = at + 3
    local window, cap = 0, 0
    for r = 1, n do
      local rule = {
        capacity = tonumber(ARGV[at]), window = tonumber(ARGV[at + 1]),
        interval = tonumber(ARGV[at + 2]), shadow = ARGV[at + 3] == '1',
      }
      spec.rules[r] = rule
      window, cap = max(window, rule.window), max(cap, rule.capacity)
      at = at + 4
    end
    spec.window, spec.cap = window, cap
    specs[k] = spec
  end
  return specs
end

local now = tonumber(ARGV[1])
if not now then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost, mode = tonumber(ARGV[2]), tonumber(ARGV[3])
local need = cost > 0 and cost or 1
local specs = plan()

-- the record: field name -> {expiry, packed state}, and the names in record order
local record, names = {}, {}
local blob = call('GET', KEYS[1])
if blob then
  local at, size = 1, #blob
  while at <= size do
    local length = unpack('>B', blob, at)
    local name = sub(blob, at + 1, at + length)
    local expire, bytes = unpack('>I7I4', blob, at + 1 + length)
    local from = at + 12 + length
    if expire > now then
      record[name] = {expire, sub(blob, from, from + bytes - 1)}
      names[#names + 1] = name
    end
    at = from + bytes
  end
end
local fields_at, dirty = #ARGV - #specs + 1, false

local function write(i, spec, state)
  local name = ARGV[fields_at + i - 1]
  dirty = true
  if state == nil then
    record[name] = nil
    return spec.twin.load(nil, now, spec)
  end
  if record[name] == nil then names[#names + 1] = name end
  local raw = spec.twin.encode(state, spec)
  record[name] = {now + spec.twin.ttl(state, now, spec), raw}
  return spec.twin.load(raw, now, spec)
end

local views = {}
for i, spec in ipairs(specs) do
  local twin, view = spec.twin, nil
  if mode == RESET then
    view = write(i, spec, nil)
  else
    local entry = record[ARGV[fields_at + i - 1]]
    view = twin.load(entry and entry[2], now, spec)
    if mode == REFUND then
      view = write(i, spec, twin.refund(view, now, cost, spec))
    end
  end
  views[i] = view
end

local retries, allowed = {}, true
for i, spec in ipairs(specs) do
  for _, rule in ipairs(spec.rules) do
    local retry = spec.twin.check(views[i], now, need, rule)
    retries[#retries + 1] = retry
    if retry > 0 and not rule.shadow then allowed = false end
  end
end

if mode == HIT and allowed and cost > 0 then
  local first = 1
  for i, spec in ipairs(specs) do
    if not spec.shadow or retries[first] == 0 then
      views[i] = write(i, spec, spec.twin.consume(views[i], now, cost, spec))
    end
    first = first + #spec.rules
  end
end

if dirty then
  local parts, latest, seen = {}, 0, {}
  for _, name in ipairs(names) do
    local entry = record[name]
    if entry and not seen[name] then
      seen[name] = true
      parts[#parts + 1] = pack('>B', #name) .. name .. pack('>I7I4', entry[1], #entry[2]) .. entry[2]
      latest = max(latest, entry[1])
    end
  end
  if #parts == 0 then
    call('DEL', KEYS[1])
  else
    save(KEYS[1], table.concat(parts), latest - now)
  end
end

local reply, position = {allowed and 1 or 0}, 1
for i, spec in ipairs(specs) do
  for _, rule in ipairs(spec.rules) do
    local remaining, reset_after = spec.twin.report(views[i], now, rule)
    reply[#reply + 1] = remaining
    reply[#reply + 1] = reset_after
    reply[#reply + 1] = retries[position]
    position = position + 1
  end
end
return reply
