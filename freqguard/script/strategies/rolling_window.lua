-- rolling-window: the Lua twin of freqguard/script/strategies/rolling_window.py; its code,
-- format and number of sub-windows are in lua/contract.lua (from the module).
-- state: a header ROLLING_WINDOW_STATE (the counts' width, grain, born, head), then one
-- count per sub-window of grain µs, oldest first, the last head's; each count as wide as the
-- largest needs, 1 to 4 bytes (a log entry's format: sliding_log.lua's FORMATS). A view:
-- {grain, born, the sub-window of now, counts}, the counts of every sub-window that still
-- counts (its last µs inside the window), up to now's.

local function ring_view(g, born, now, window)  -- every sub-window that counts, empty
  local cur = now - now % g
  local earliest = now - window - g + 2
  local first = earliest + (-earliest) % g  -- rolling_window.py oldest
  local counts = {}
  for i = 1, (cur - first) / g + 1 do counts[i] = 0 end
  return {g, born, cur, counts}
end

local function ring_read(raw)  -- a packed ring's grain, born, head and counts
  local width, g, born, head = sunpack(ROLLING_WINDOW_STATE, raw)
  local n = (#raw - rolling_window.state_bytes) / width
  local counts = {}
  if n > 0 then
    counts = {sunpack(rep(FORMATS[width], n), raw, rolling_window.state_bytes + 1)}
    counts[n + 1] = nil  -- the position unpack returns after the values
  end
  return g, born, head, counts
end

-- A ring kept at another grain (rolling_window.py _regrained), into a view at this one:
-- each sub-window's units in the sub-window of its last µs (or of now, if earlier), a new
-- generation.
local function ring_regrained(view, old, head, counts, now)
  local g, out = view[1], view[4]
  local first = view[3] - (#out - 1) * g
  local start = head - (#counts - 1) * old
  for i = 1, #counts do
    local last = min(start + (i - 1) * old + old - 1, now)
    local at = last - last % g
    if counts[i] > 0 and at >= first then
      local k = (at - first) / g + 1
      out[k] = out[k] + counts[i]
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
  local head = pack(ROLLING_WINDOW_STATE, width, view[1], view[2], view[3])
  if lo > n then return head end
  return head .. pack(rep(FORMATS[width], n - lo + 1), tunpack(counts, lo, n))
end

function rolling_window.load(raw, now, spec)
  local window = spec.window
  local g = ceil(window / ROLLING_WINDOW_SUB_WINDOWS)
  if not raw then return ring_view(g, now, now, window) end
  local old, born, head, counts = ring_read(raw)
  local view = ring_view(g, born, now, window)
  if old ~= g then return ring_regrained(view, old, head, counts, now) end
  local out = view[4]
  local room = #out - (view[3] - head) / g  -- the view's sub-windows up to head
  for i = 1, min(room, #counts) do out[room - i + 1] = counts[#counts - i + 1] end
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
  else  -- the hit's own sub-window ("born:start"), while it counts; else another ring
    local born, start = match(mark, '^(%d+)' .. MARK_SEPARATOR .. '(%d+)$')
    if tonumber(born) == view[2] then
      local i = #counts - (view[3] - tonumber(start)) / view[1]
      if i >= 1 and i <= #counts then counts[i] = max(0, counts[i] - cost) end
    end
  end
  return ring_pack(view, counts)
end

function rolling_window.ttl(raw, now, spec)  -- when the newest sub-window leaves
  local _, g, _, head = sunpack(ROLLING_WINDOW_STATE, raw)
  return head + g - 1 + spec.window - now
end

function rolling_window.limited(rule, n, w)
  return counted(rule, n, w)
end
