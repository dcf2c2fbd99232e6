-- rolling-window: the Lua twin of freqguard/script/strategies/rolling_window.py; its code,
-- format and number of sub-windows are in lua/contract.lua (from the module).
-- state: a header ROLLING_WINDOW_STATE (the counts' width, grain, born, head), then one
-- count per sub-window of grain µs, oldest first, the last head's; each count as wide as the
-- largest needs, 1 to 4 bytes (a log entry's format: sliding_log.lua's FORMATS), saturating
-- at ROLLING_WINDOW_MOST; a carry (ROLLING_WINDOW_CARRY: its units, the last µs of the newest)
-- between them when the width byte has the CARRIED flag, then a keep (ROLLING_WINDOW_KEEP:
-- a window it carries for at least, past its spec's base) when it has the KEPT flag. A
-- view: {grain, born, the sub-window of now, counts, carry, last, keep}, the counts of every
-- sub-window that still counts (its last µs inside the window), up to now's.

local function ring_view(g, born, now, window)  -- every sub-window that counts, empty
  local cur = now - now % g
  local earliest = now - window - g + 2
  local first = earliest + (-earliest) % g  -- rolling_window.py oldest
  local counts = {}
  for i = 1, (cur - first) / g + 1 do counts[i] = 0 end
  return {g, born, cur, counts, 0, 0, 0}
end

-- a packed ring's grain, born, head, counts, carry, last and keep
local function ring_read(raw)
  local width, g, born, head = sunpack(ROLLING_WINDOW_STATE, raw)
  local at, carry, last, keep = rolling_window.state_bytes + 1, 0, 0, 0
  if width >= ROLLING_WINDOW_CARRIED then
    width = width - ROLLING_WINDOW_CARRIED
    carry, last = sunpack(ROLLING_WINDOW_CARRY, raw, at)
    at = at + ROLLING_WINDOW_CARRY_BYTES
  end
  if width >= ROLLING_WINDOW_KEPT then
    width = width - ROLLING_WINDOW_KEPT
    keep = sunpack(ROLLING_WINDOW_KEEP, raw, at)
    at = at + ROLLING_WINDOW_KEEP_BYTES
  end
  local n = (#raw - at + 1) / width
  local counts = {}
  if n > 0 then
    counts = {sunpack(rep(FORMATS[width], n), raw, at)}
    counts[n + 1] = nil  -- the position unpack returns after the values
  end
  return g, born, head, counts, carry, last, keep
end

-- A ring kept at another grain (rolling_window.py _regrained), into a view at this one:
-- each sub-window's units in the sub-window of its last µs (or of now, if earlier), a new
-- generation; those too old for it into left ({its last µs, its units} each).
local function ring_regrained(view, old, head, counts, now, left)
  local g, out = view[1], view[4]
  local first = view[3] - (#out - 1) * g
  local start = head - (#counts - 1) * old
  for i = 1, #counts do
    local last = min(start + (i - 1) * old + old - 1, now)
    local at = last - last % g
    if at >= first then
      local k = (at - first) / g + 1
      out[k] = min(ROLLING_WINDOW_MOST, out[k] + counts[i])
    else
      left[#left + 1] = {last, counts[i]}
    end
  end
  view[2] = max(now, view[2] + 1)
  return view
end

-- When the view's i-th sub-window stops counting: its last µs leaves the window.
local function ring_leaves(view, i, window)
  return view[3] - (#view[4] - i) * view[1] + view[1] - 1 + window
end

-- A state as stored: from the oldest sub-window that is not empty, each count as wide as
-- the largest needs.
local function ring_pack(view, counts)
  local lo, n, most, width = 1, #counts, 0, 1
  while lo <= n and counts[lo] == 0 do lo = lo + 1 end
  for i = lo, n do most = max(most, counts[i]) end
  while width < 4 and 256 ^ width <= most do width = width + 1 end
  local flags, carried, kept = width, '', ''
  if view[5] > 0 then
    flags, carried = flags + ROLLING_WINDOW_CARRIED, pack(ROLLING_WINDOW_CARRY, view[5], view[6])
  end
  if view[7] > 0 then
    flags, kept = flags + ROLLING_WINDOW_KEPT, pack(ROLLING_WINDOW_KEEP, view[7])
  end
  local head = pack(ROLLING_WINDOW_STATE, flags, view[1], view[2], view[3]) .. carried .. kept
  if lo > n then return head end
  return head .. pack(rep(FORMATS[width], n - lo + 1), tunpack(counts, lo, n))
end

-- The keep a ring that remembered keep stores: that, or the window the spec keeps past its
-- base (a tier's) if longer; 0: none (rolling_window.py _keeping).
local function ring_keeping(keep, spec)
  return max(keep, spec.keep_window)
end

-- The ring is of the rate in force (a limit's); the spec's window, the rule's own when
-- longer (keeps_own), or the keep's: the units that leave the ring inside it are carried,
-- and go back into the ring once it is of that window again (rolling_window.py load).
function rolling_window.load(raw, now, spec)
  local window = spec.rules[1].window
  local g = ceil(window / ROLLING_WINDOW_SUB_WINDOWS)
  if not raw then
    local view = ring_view(g, now, now, window)
    view[7] = ring_keeping(0, spec)
    return view
  end
  local old, born, head, counts, carry, last, keep = ring_read(raw)
  local own = max(spec.window, keep)  -- what it carries for
  local view, left = ring_view(g, born, now, window), {}
  if old ~= g then
    ring_regrained(view, old, head, counts, now, left)
  else
    local out = view[4]
    local room = #out - (view[3] - head) / g  -- the view's sub-windows up to head
    local kept = max(0, min(room, #counts))
    for i = 1, kept do out[room - i + 1] = counts[#counts - i + 1] end
    local start = head - (#counts - 1) * g  -- the sub-windows before kept left the ring
    for i = 1, #counts - kept do left[i] = {start + (i - 1) * g + g - 1, counts[i]} end
  end
  if last + own <= now then carry, last = 0, 0 end  -- it left the own window
  for i = 1, #left do  -- still inside the own window: carried
    local ends, units = left[i][1], left[i][2]
    if units > 0 and ends + own > now then
      carry, last = min(ROLLING_WINDOW_MOST, carry + units), max(last, ends)
    end
  end
  if carry > 0 and last + window > now then  -- inside the ring's window again
    local at = min(last, now)
    local k = (at - at % g - (view[3] - (#view[4] - 1) * g)) / g + 1
    view[4][k] = min(ROLLING_WINDOW_MOST, view[4][k] + carry)
    carry, last = 0, 0
  end
  view[5], view[6], view[7] = carry, last, ring_keeping(keep, spec)
  return view
end

function rolling_window.check(view, now, need, rule)
  local counts, total, freed = view[4], 0, 0
  for i = 1, #counts do total = total + counts[i] end
  local excess = total + need - rule.capacity
  if excess <= 0 then return 0 end
  if excess > total then  -- more than the rule could ever admit: report when it is empty
    if total == 0 then return rule.window end
    local newest = #counts
    while counts[newest] == 0 do newest = newest - 1 end
    return max(1, ring_leaves(view, newest, rule.window) - now)
  end
  for i = 1, #counts do  -- the oldest sub-windows leave first
    freed = freed + counts[i]
    if freed >= excess then return ring_leaves(view, i, rule.window) - now end
  end
end

function rolling_window.consume(view, now, cost, spec)
  local counts = {tunpack(view[4])}
  counts[#counts] = counts[#counts] + cost
  return ring_pack(view, counts)
end

function rolling_window.refund(view, now, cost, spec, mark)
  local counts = {tunpack(view[4])}
  if not mark then  -- the newest units inside the window, whoever's they are
    for i = #counts, 1, -1 do
      local took = min(cost, counts[i])
      counts[i], cost = counts[i] - took, cost - took
    end
  else  -- the hit's own sub-window ("born:start"), while it counts; else another ring (one
    -- begun after a reset on a pinned clock may be born at the µs a ring moved to another
    -- grain was: its sub-windows start elsewhere)
    local born, start = match(mark, '^(%d+)' .. MARK_SEPARATOR .. '(%d+)$')
    if tonumber(born) == view[2] and (view[3] - tonumber(start)) % view[1] == 0 then
      local i = #counts - (view[3] - tonumber(start)) / view[1]
      if i >= 1 and i <= #counts then counts[i] = max(0, counts[i] - cost) end
    end
  end
  return ring_pack(view, counts)
end

function rolling_window.newest(raw)  -- the latest time it names: its ring's birth
  local _, _, born = sunpack(ROLLING_WINDOW_STATE, raw)
  return born
end

function rolling_window.ttl(raw, now, spec)  -- when the newest sub-window leaves
  local width, g, _, head = sunpack(ROLLING_WINDOW_STATE, raw)
  local window, at = spec.window, rolling_window.state_bytes + 1
  if width >= ROLLING_WINDOW_CARRIED then
    width, at = width - ROLLING_WINDOW_CARRIED, at + ROLLING_WINDOW_CARRY_BYTES
  end
  if width >= ROLLING_WINDOW_KEPT then  -- a keep: it carries for that long
    window = max(window, (sunpack(ROLLING_WINDOW_KEEP, raw, at)))
  end
  return head + g - 1 + window - now
end

function rolling_window.limited(rule, n, w)
  return counted(rule, n, w)
end
