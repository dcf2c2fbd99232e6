-- sliding-log: the Lua twin of freqguard/script/strategies/sliding_log.py; its code and
-- format are in lua/contract.lua (from the module).
-- state: ascending timestamps, packed: a header SLIDING_LOG_STATE (entry width w, base),
-- then one w-byte offset from base per entry, at most the largest capacity of them. The
-- width holds four times the longest window, so the base moves (re-encoding the entries)
-- only every few windows. Entries that left the window stay until a hit that consumes or a
-- refund of the newest units drops them (a refund by mark drops none), as the Python
-- twin's do: a window made longer meanwhile (a per-key limit, a deploy's longer lease)
-- counts them again, in both alike. A keep (SLIDING_LOG_KEEP: a window and a count) after the
-- header, when its width byte has the SLIDING_LOG_KEPT flag: what a tier the log was decided
-- at asked of it past its spec's base, kept until it expires (sliding_log.py kept).
local LOG_HEADER_BYTES = sliding_log.state_bytes  -- the header's size
local FORMATS = {'>I1', '>I2', '>I3', '>I4', '>I5', '>I6', '>I7'}  -- an entry, by its width

local function log_width(window)
  local w, needed = 1, window * 4
  while w < 7 and 256 ^ w <= needed do w = w + 1 end
  return w
end

local function log_at(view, i)  -- the i-th timestamp (1-based)
  return view.base + sunpack(view.fmt, view.raw, view.at + 1 + (i - 1) * view.width)
end

local function log_upto(view, t)  -- how many entries are <= t (binary search)
  local lo, hi = 0, view.n
  while lo < hi do
    local mid = floor((lo + hi + 1) / 2)
    if log_at(view, mid) <= t then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- view.at: the bytes before the entries; keep_window, keep_cap: what it remembers (0: none)
function sliding_log.load(raw, now, spec)
  if not raw then
    return {n = 0, width = spec.width, base = now, at = LOG_HEADER_BYTES, keep_window = 0,
      keep_cap = 0}
  end
  local width, base = sunpack(SLIDING_LOG_STATE, raw)
  local at, keep_window, keep_cap = LOG_HEADER_BYTES, 0, 0
  if width >= SLIDING_LOG_KEPT then
    width = width - SLIDING_LOG_KEPT
    keep_window, keep_cap = sunpack(SLIDING_LOG_KEEP, raw, at + 1)
    at = at + SLIDING_LOG_KEEP_BYTES
  end
  local n = (#raw - at) / width
  return {raw = raw, n = n, width = width, base = base, fmt = FORMATS[width], at = at,
    keep_window = keep_window, keep_cap = keep_cap}
end

-- What the log keeps under spec (sliding_log.py kept): the window, the count, the entries'
-- width and the offsets it holds; and the keep to store: what the view remembers, and
-- what the spec keeps past its base (a tier's), '' where neither (sliding_log.py _keeping).
local function log_keeps(view, spec)
  local window, cap = max(spec.window, view.keep_window), max(spec.cap, view.keep_cap)
  local width, range, keep = spec.width, spec.offset_range, ''
  if window > spec.window then
    width = log_width(window)
    range = 256 ^ width
  end
  local keep_window = max(view.keep_window, spec.keep_window)
  local keep_cap = max(view.keep_cap, spec.keep_cap)
  if keep_window > 0 or keep_cap > 0 then keep = pack(SLIDING_LOG_KEEP, keep_window, keep_cap) end
  return window, cap, width, range, keep
end

local function log_head(width, base, keep)  -- the header, and the keep if any
  if keep == '' then return pack(SLIDING_LOG_STATE, width, base) end
  return pack(SLIDING_LOG_STATE, width + SLIDING_LOG_KEPT, base) .. keep
end

-- The log is sorted, so the rule admits `need` more iff the entry `capacity - need + 1`
-- from the newest has left the window, and that entry is also when it does: one read.
function sliding_log.check(view, now, need, rule)
  local n = view.n
  local j = n - rule.capacity + need
  if j < 1 then return 0 end
  if j > n then  -- more than the rule could ever admit: report when it is empty
    if n > 0 then
      local newest = log_at(view, n)
      if newest > now - rule.window then return max(1, newest + rule.window - now) end
    end
    return rule.window
  end
  local wait = log_at(view, j) + rule.window - now
  if wait > 0 then return wait end
  return 0
end

local function log_pack(width, entries, keep)  -- re-encode, the base at the oldest entry
  local base = entries[1]
  local parts, fmt = {log_head(width, base, keep)}, FORMATS[width]
  for i = 1, #entries do parts[i + 1] = pack(fmt, entries[i] - base) end
  return concat(parts)
end

function sliding_log.consume(view, now, cost, spec)
  local window, cap, width, range, stamp = log_keeps(view, spec)
  local n = view.n
  local added = min(cost, cap)
  if n == 0 or log_at(view, n) <= now - window then  -- nothing left in the window
    return log_head(width, now, stamp) .. rep(pack(FORMATS[width], 0), added)
  end
  local base = view.base
  if width == view.width and now - base < range then
    -- the usual case: append, and drop the oldest past the cap and those that left the
    -- window (as sliding_log.py consume: a window made longer later must not count them)
    local keep, cutoff = min(n, cap - added), now - window
    if keep > 0 and log_at(view, n - keep + 1) <= cutoff then keep = n - log_upto(view, cutoff) end
    return log_head(width, base, stamp) .. sub(view.raw, view.at + 1 + (n - keep) * width)
      .. rep(pack(view.fmt, now - base), added)
  end
  -- a rebase or a new width: re-encode (time never goes back, so `now` goes last)
  local merged, cutoff = {}, now - window
  for i = 1, n do
    local t = log_at(view, i)
    if t > cutoff then merged[#merged + 1] = t end
  end
  for _ = 1, added do merged[#merged + 1] = now end
  local kept = {}
  for i = max(1, #merged - cap + 1), #merged do kept[#kept + 1] = merged[i] end
  return log_pack(width, kept, stamp)
end

-- A refund keeps the header and the keep as they are (it records no rate's).
function sliding_log.refund(view, now, cost, spec, mark)
  mark = mark and tonumber(mark)
  local at = view.at
  local head = sub(view.raw, 1, at)
  if not mark then  -- the newest units inside the window, whoever's they are; those that
    -- left it go too (as sliding_log.py refund)
    local window = max(spec.window, view.keep_window)
    local last, lo = view.n - cost, log_upto(view, now - window)
    if last <= lo then return head end
    return head .. sub(view.raw, at + 1 + lo * view.width, at + last * view.width)
  end
  local hi = log_upto(view, mark)  -- the hit's own units: the entries equal to its time
  local lo = max(log_upto(view, mark - 1), hi - cost)
  return sub(view.raw, 1, at + lo * view.width) .. sub(view.raw, at + 1 + hi * view.width)
end

function sliding_log.ttl(raw, now, spec)
  local width, base = sunpack(SLIDING_LOG_STATE, raw)
  local window = spec.window
  if width >= SLIDING_LOG_KEPT then
    width = width - SLIDING_LOG_KEPT
    window = max(window, (sunpack(SLIDING_LOG_KEEP, raw, LOG_HEADER_BYTES + 1)))
  end
  return base + sunpack(FORMATS[width], raw, #raw - width + 1) + window - now
end

function sliding_log.limited(rule, n, w)  -- one entry per unit: at most MAX_LOG_LIMIT
  if n > MAX_LOG_LIMIT then return nil end
  return counted(rule, n, w)
end
