#!lua name=__LIBRARY__
-- freqguard policy function: the Lua twin of freqguard/script/twin.py (run) and of the strategy
-- twins in freqguard/script/strategies/*.py. Each strategy below has the functions of its Python
-- module, under the same names and in the same order, except report: the server only
-- decides and returns the states it leaves behind, and the client (script/calls.py, Reply) derives
-- remaining and reset from them, so no server time goes to answers most callers never read.
--
-- A Redis Function (FUNCTION LOAD, FCALL), not an EVAL script: the strategies' functions and
-- the parsed specs are built once per server, not on every call.
--
-- Layout: the contract's constants; the strategies; the specs; the record; the policy
-- function's steps, then the function itself (run), which calls them in that order. The
-- Python twin (freqguard/script/twin.py) defines the steps both twins share under the same names,
-- in the same order (freqguard/script/contract.py RUN_STEPS).
--
-- KEYS   [1] the record: a hash holding every state of one partition (recipient) and policy
-- ARGV   read through the named positions below (contract.py ARGV, ARGV_STATES):
--        [ARGV_NOW] microseconds, or "" to use the server's TIME
--        [ARGV_COST] integer >= 0 (0: only check)
--        [ARGV_MODE] 0 HIT, 1 CHECK, 2 REFUND, 3 RESET, 4 LIMIT
--        [ARGV_SPECS] space-separated integers: the number of states, then for each state
--            its strategy's code (see TWINS), shadow (0/1) and number of rules, then for each
--            rule: capacity, window (µs), interval (µs per token, buckets; else 0), shadow
--            (0/1), tag (names the rule for per-key limits), reserve (a priority's cap),
--            burst (a bucket rule's own, 0: none); after a calendar state's
--            rules, the periods around the client's clock (CALENDAR_BOUNDS); see parse_specs
--        [ARGV_FIELDS ...] one per state, its field in the record (a 2-byte field tag, plus
--            the 8-byte digest of its other dimension values when it has any)
--        then, REFUND only and optional: one per state, the mark the hit to give back left
--            there (calls.Reply.marks: its time; "tat:back:born:interval" for buckets), ""
--            where it consumed nothing; without them a refund gives back the newest units
--        or, LIMIT only: the change to the record's per-key limits (change_limits)
-- Reply  one string: REPLY_HEAD, flags (1 allowed, plus REPLY_LIMITS when limits follow,
--        REPLY_DROPPED, see Layout) and the µs it was judged at (see Time); REPLY_WAIT per rule in spec order, its wait
--        (µs until the rule would admit the hit; 0: it does); then per state
--        REPLY_STATE_LENGTH and the packed state the call leaves behind (length 0: none);
--        then the record's per-key limits, as stored (LIMIT_ENTRY each), if any.
-- Record each state's field holds FIELD_HEAD, its expiry and the latest time it was written
--        at (µs), then the packed state (absent once expired). The field "" holds
--        RECORD_META: the layout's mark, the expiry the record was given, its number of state
--        fields, and the count at which stale fields are next pruned (prune_at), then the
--        record's per-key limits (LIMIT_ENTRY each). The record's TTL covers every field and limit (with some
--        slack, so most writes leave it alone; plus a grace period when time is pinned); a
--        limit set for ever keeps the record for ever.
-- Time   the server's TIME unless pinned, or the latest time a state of the call was written
--        at if that is later: time per state never goes back (a lagging clock after a
--        failover, calls out of order). All arithmetic on integers below 2^53
--        (freqguard/bounds.py).
-- Layout each record states its layout (RECORD_LAYOUT) in its meta field's first byte,
--        LAYOUT_MARKS + the layout. A record without a mark (freqguard 0.1, whose layouts
--        cannot be told apart) is dropped, its call decided as if it were absent; one of a
--        newer layout is refused, never misread (see check_layout). Layout 3 stores states
--        short where they fit (SHORT_SPAN); layout 2 stored every state in full, which
--        layout 3 still reads, so a layout-2 record is read as it is and marked 3 by the
--        first call that writes it.

-- The contract (freqguard/script/contract.py; tests/test_contract.py holds these to it) -----------
local HIT, CHECK, REFUND, RESET, LIMIT = 0, 1, 2, 3, 4
-- The call's arguments (contract.py ARGV): these positions, then one field per state from
-- ARGV_FIELDS on, then (a refund of one decision) one mark per state.
local ARGV_NOW, ARGV_COST, ARGV_MODE, ARGV_SPECS = 1, 2, 3, 4
local ARGV_FIELDS = ARGV_SPECS + 1
local ARGV_RECORD = 1  -- a bucketed call's ARGV: the record's id in its bucket, then the above
local MARK_SEPARATOR = ':'  -- a bucket's mark: tat, back, born and interval, joined by it
local MARK_PATTERN = '^(%d+)' .. MARK_SEPARATOR .. '(%d+)' .. MARK_SEPARATOR .. '(%d+)'
-- With a pinned clock (tests, replays) the caller's time and the server's expiry clock
-- differ: a record must not expire in real time while it still matters in pinned time.
local PINNED_GRACE_MS = 600000
local PRUNE_FLOOR = 8  -- stale fields are pruned once a record holds more than this
-- A state past its expiry no longer counts, but is kept STALE_GRACE longer before it is
-- deleted (as in the memory backend), so a clock that steps back by less finds it again.
local STALE_GRACE = 1000000
local BACK_LIMIT = 2 ^ 50  -- see next_back
-- How the record's fields and the reply are packed (freqguard/script/contract.py); each
-- strategy's code and state are in its own section below.
local FIELD_HEAD = '>I7I7'               -- a state's field: expiry, latest, then the state
local FIELD_HEAD_BYTES = 14              -- its size
local RECORD_META = '>BI7I4I4'           -- the field "": mark, expiry, fields, prune_at
local RECORD_META_BYTES = 16             -- its size; the record's per-key limits follow
local RECORD_LAYOUT = 3                  -- the layout this release writes
local OLDEST_LAYOUT = 2                  -- the oldest it reads (every state in full)
local LAYOUT_MARKS = 240                 -- a meta field's mark: LAYOUT_MARKS + its layout
local LIMIT_ENTRY = '>I4I7BI4I7I4I7'     -- one limit: tag, expiry, exempt, limit, window,
local LIMIT_ENTRY_BYTES = 34             -- capacity, interval; and its size
local REPLY_HEAD = '>BI8'                -- flags, now
local REPLY_LIMITS = 2                   -- the flag: the record's limits follow the states
local REPLY_DROPPED = 4                  -- the flag: a record without a mark was dropped
local REPLY_WAIT = 'I8'                  -- then one per rule
local REPLY_STATE_LENGTH = '>I4'         -- then per state, before the state
local NEVER = 2 ^ 60                     -- the expiry of what never expires
-- The bounds of a rule's own numbers (freqguard/bounds.py), which a per-key limit is held to
-- as well (each strategy's limited): a sliding log's limit, a bucket's refill time (µs).
local MAX_LOG_LIMIT = 10000
local MAX_SPAN_US = 10 * 366 * 86400 * 1000000
-- A state stored short (each strategy's <NAME>_SHORT, told from its full form by its
-- length) holds born as its distance from the time before it, in 5 bytes, and no back (a
-- bucket's: 0 until a refund); a window's count in 2 bytes. Beyond these, or with a time
-- below 0 (a calendar period begun before 1970, read back as the full form reads it), the
-- full form: both read back the same numbers.
local SHORT_SPAN = 2 ^ 40                -- what 5 bytes hold
local SHORT_COUNT = 2 ^ 16               -- what 2 bytes hold

-- The libraries, bound by bind() on the first call: the load context offers none of them
-- (not even tonumber), so nothing below may read them before a call.
local floor, max, min, ceil
local pack, sunpack, sub, rep, match, gmatch, format, byte, char
local concat, tunpack, call

local function bind()
  floor, max, min, ceil = math.floor, math.max, math.min, math.ceil
  pack, sunpack, sub, rep = struct.pack, struct.unpack, string.sub, string.rep
  match, gmatch, format, byte = string.match, string.gmatch, string.format, string.byte
  char = string.char
  concat, tunpack, call = table.concat, unpack, redis.call
end

-- A rule as a per-key limit of n per w µs makes it decide (strategies/base.py counted and
-- metered): a count of n per window w, or a bucket of one token per w / n µs (rounded up)
-- that keeps the rule's own burst; nil where the numbers cannot be (past a bucket's bound).
local function rule_at(rule, capacity, window, interval)
  return {capacity = capacity, window = window, interval = interval, shadow = rule.shadow,
    tag = rule.tag, reserve = rule.reserve, burst = rule.burst}
end

local function counted(rule, n, w)
  if n < 1 or w < 1 then return nil end
  return rule_at(rule, n, w, 0)
end

local function metered(rule, n, w)
  if n < 1 or w < 1 then return nil end
  local interval = ceil(w / n)
  local capacity = rule.burst > 0 and rule.burst or n
  if capacity * interval > MAX_SPAN_US then return nil end
  return rule_at(rule, capacity, w, interval)
end

-- fixed-window ----------------------------------------------------------------------------
-- state: (window_start, count, born), packed as FIXED_WINDOW_STATE; born: when this window's
-- count began, which a refund's mark must name (a count begun again after a reset is another)
local FIXED_WINDOW_STATE = '>I7I4I7'     -- window_start, count, born
local FIXED_WINDOW_SHORT = '>I7I2I5'     -- window_start, count, born - window_start
local COUNT_SHORT_BYTES = 14             -- its size (and CALENDAR_SHORT's)
local fixed_window = {code = 1}

-- A counted state (start, count, born), fixed-window's or calendar's, as stored: short
-- while the count fits and born is at most SHORT_SPAN after start, else in full.
local function count_pack(full, short, start, count, born)
  local age = born - start
  if count < SHORT_COUNT and start >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(short, start, count, age)
  end
  return pack(full, start, count, born)
end

local function count_read(full, short, raw)
  if #raw == COUNT_SHORT_BYTES then
    local start, count, age = sunpack(short, raw)
    return start, count, start + age
  end
  local start, count, born = sunpack(full, raw)
  return start, count, born
end

function fixed_window.load(raw, now, spec)
  local start = now - now % spec.rules[1].window
  if raw then
    local stored, count, born = count_read(FIXED_WINDOW_STATE, FIXED_WINDOW_SHORT, raw)
    if stored == start then return {start, count, born} end
  end
  return {start, 0, now}
end

function fixed_window.check(view, now, need, rule)
  if view[2] + need <= rule.capacity then return 0 end
  return view[1] + rule.window - now
end

function fixed_window.consume(view, now, cost, spec)
  return count_pack(FIXED_WINDOW_STATE, FIXED_WINDOW_SHORT, view[1], view[2] + cost, view[3])
end

function fixed_window.refund(view, now, cost, spec, mark)
  local count = max(0, view[2] - cost)
  if mark and tonumber(mark) ~= view[3] then count = view[2] end  -- not the hit's count
  return count_pack(FIXED_WINDOW_STATE, FIXED_WINDOW_SHORT, view[1], count, view[3])
end

function fixed_window.ttl(raw, now, spec)  -- the start leads both forms
  return sunpack(FIXED_WINDOW_SHORT, raw) + spec.rules[1].window - now
end

function fixed_window.limited(rule, n, w)
  return counted(rule, n, w)
end

-- sliding-log -----------------------------------------------------------------------------
-- state: ascending timestamps, packed: a header ">BI7" (entry width w, base), then one
-- w-byte offset from base per entry, at most the largest capacity of them. The width holds
-- four times the longest window, so the base moves (re-encoding the entries) only every
-- few windows. Entries that left the window may stay until they are pushed out: every
-- rule counts only the entries inside its own window, as the Python twin does.
local SLIDING_LOG_STATE = '>BI7'         -- the header: entry width, base; then the entries
local LOG_HEADER_BYTES = 8               -- its size
local sliding_log = {code = 2}
local FORMATS = {'>I1', '>I2', '>I3', '>I4', '>I5', '>I6', '>I7'}

local function log_width(window)
  local w, needed = 1, window * 4
  while w < 7 and 256 ^ w <= needed do w = w + 1 end
  return w
end

local function log_at(view, i)  -- the i-th timestamp (1-based)
  return view.base + sunpack(view.fmt, view.raw, LOG_HEADER_BYTES + 1 + (i - 1) * view.width)
end

function sliding_log.load(raw, now, spec)
  if not raw then return {n = 0, width = spec.width, base = now} end
  local width, base = sunpack(SLIDING_LOG_STATE, raw)
  local n = (#raw - LOG_HEADER_BYTES) / width
  return {raw = raw, n = n, width = width, base = base, fmt = FORMATS[width]}
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

local function log_pack(width, entries)  -- re-encode, the base at the oldest entry
  local base = entries[1]
  local parts, fmt = {pack(SLIDING_LOG_STATE, width, base)}, FORMATS[width]
  for i = 1, #entries do parts[i + 1] = pack(fmt, entries[i] - base) end
  return concat(parts)
end

function sliding_log.consume(view, now, cost, spec)
  local n, width, cap = view.n, spec.width, spec.cap
  local added = min(cost, cap)
  if n == 0 or log_at(view, n) <= now - spec.window then  -- nothing left in the window
    return pack(SLIDING_LOG_STATE, width, now) .. rep(pack(FORMATS[width], 0), added)
  end
  local base = view.base
  if width == view.width and now - base < spec.offset_range then
    local keep = min(n, cap - added)  -- the usual case: trim the oldest, append
    local head = sub(view.raw, 1, LOG_HEADER_BYTES)
    return head .. sub(view.raw, LOG_HEADER_BYTES + 1 + (n - keep) * width)
      .. rep(pack(view.fmt, now - base), added)
  end
  -- a rebase or a new width: re-encode (time never goes back, so `now` goes last)
  local merged, cutoff = {}, now - spec.window
  for i = 1, n do
    local t = log_at(view, i)
    if t > cutoff then merged[#merged + 1] = t end
  end
  for _ = 1, added do merged[#merged + 1] = now end
  local kept = {}
  for i = max(1, #merged - cap + 1), #merged do kept[#kept + 1] = merged[i] end
  return log_pack(width, kept)
end

local function log_upto(view, t)  -- how many entries are <= t (binary search)
  local lo, hi = 0, view.n
  while lo < hi do
    local mid = floor((lo + hi + 1) / 2)
    if log_at(view, mid) <= t then lo = mid else hi = mid - 1 end
  end
  return lo
end

function sliding_log.refund(view, now, cost, spec, mark)
  mark = mark and tonumber(mark)
  local head = sub(view.raw, 1, LOG_HEADER_BYTES)
  if not mark then  -- the newest units inside the window, whoever's they are
    local last = view.n - cost
    if last < 1 or log_at(view, last) <= now - spec.window then return head end
    return sub(view.raw, 1, LOG_HEADER_BYTES + last * view.width)
  end
  local hi = log_upto(view, mark)  -- the hit's own units: the entries equal to its time
  local lo = max(log_upto(view, mark - 1), hi - cost)
  return sub(view.raw, 1, LOG_HEADER_BYTES + lo * view.width)
    .. sub(view.raw, LOG_HEADER_BYTES + 1 + hi * view.width)
end

function sliding_log.ttl(raw, now, spec)
  local width, base = sunpack(SLIDING_LOG_STATE, raw)
  return base + sunpack(FORMATS[width], raw, #raw - width + 1) + spec.window - now
end

function sliding_log.limited(rule, n, w)  -- one entry per unit: at most MAX_LOG_LIMIT
  if n > MAX_LOG_LIMIT then return nil end
  return counted(rule, n, w)
end

-- How far (µs) a refund moves a bucket's arrival time back (strategies/gcra.py give_back):
-- with a mark "tat:back:born:interval" (what the hit left), the part of the hit's own span
-- (at its own interval; a mark without one: at today's) still ahead of now, the span taken
-- to have moved back by all that was given back since; none if the state was born after
-- the hit; without a mark, the whole cost.
local function give_back(view, now, cost, interval, mark)
  if not mark then return cost * interval end
  local tat, back, born = match(mark, MARK_PATTERN .. '$')
  local charged = interval
  if not tat then
    tat, back, born, charged = match(mark, MARK_PATTERN .. MARK_SEPARATOR .. '(%d+)$')
  end
  local span = cost * tonumber(charged)
  if tonumber(born) ~= view[3] then return 0 end
  local finish = tonumber(tat) - (view[2] - tonumber(back))  -- difference first: < 2^53
  return max(0, finish - max(now, finish - span))
end

-- After a refund: past BACK_LIMIT µs given back a state starts a new generation, so that
-- back stays exact in doubles (strategies/gcra.py next_back).
local function next_back(back, born)
  if back > BACK_LIMIT then return 0, born + 1 end
  return back, born
end

-- token-bucket ----------------------------------------------------------------------------
-- state: (tokens, last, back, born), packed as TOKEN_BUCKET_STATE; back and born as gcra's
local TOKEN_BUCKET_STATE = '>I4I7I7I7'   -- tokens, last, back, born
local TOKEN_BUCKET_SHORT = '>I4I7I5'     -- tokens, last, last - born; back 0
local TOKEN_BUCKET_SHORT_BYTES = 16      -- its size
local token_bucket = {code = 3}

local function token_pack(tokens, last, back, born)
  local age = last - born
  if back == 0 and born >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(TOKEN_BUCKET_SHORT, tokens, last, age)
  end
  return pack(TOKEN_BUCKET_STATE, tokens, last, back, born)
end

local function token_read(raw)
  if #raw == TOKEN_BUCKET_SHORT_BYTES then
    local tokens, last, age = sunpack(TOKEN_BUCKET_SHORT, raw)
    return tokens, last, 0, last - age
  end
  local tokens, last, back, born = sunpack(TOKEN_BUCKET_STATE, raw)
  return tokens, last, back, born
end

function token_bucket.load(raw, now, spec)
  local rule = spec.rules[1]
  if not raw then return {rule.capacity, now, 0, now} end
  local tokens, last, back, born = token_read(raw)
  if now > last then
    local earned = floor((now - last) / rule.interval)
    tokens = tokens + earned
    last = last + earned * rule.interval
  end
  if tokens >= rule.capacity then return {rule.capacity, now, 0, max(now, born + 1)} end
  return {tokens, last, back, born}
end

function token_bucket.check(view, now, need, rule)
  if view[1] >= need then return 0 end
  return (need - view[1]) * rule.interval - (now - view[2])
end

function token_bucket.consume(view, now, cost, spec)
  return token_pack(view[1] - cost, view[2], view[3], view[4])
end

function token_bucket.refund(view, now, cost, spec, mark)
  local rule = spec.rules[1]
  local tat = view[2] + (rule.capacity - view[1]) * rule.interval  -- as gcra's
  local moved = give_back({tat, view[3], view[4]}, now, cost, rule.interval, mark)
  local short = moved % rule.interval - view[2]  -- last stays >= 0 (token_bucket.py)
  if short > 0 then moved = moved - short end
  local tokens = view[1] + floor(moved / rule.interval)
  if tokens >= rule.capacity then
    local back, born = next_back(view[3] + (tat - now), view[4])
    return token_pack(rule.capacity, now, back, born)
  end
  local back, born = next_back(view[3] + moved, view[4])
  return token_pack(tokens, view[2] - moved % rule.interval, back, born)
end

function token_bucket.ttl(raw, now, spec)
  local rule = spec.rules[1]
  local tokens, last = sunpack(TOKEN_BUCKET_SHORT, raw)  -- both forms begin so
  return (rule.capacity - tokens) * rule.interval - (now - last)
end

function token_bucket.limited(rule, n, w)
  return metered(rule, n, w)
end

-- gcra ------------------------------------------------------------------------------------
-- state: the theoretical arrival time, what refunds moved it back since the state was born,
-- and when that was: (tat, back, born), packed as GCRA_STATE
local GCRA_STATE = '>I7I7I7'             -- tat, back, born
local GCRA_SHORT = '>I7I5'               -- tat, tat - born; back 0
local GCRA_SHORT_BYTES = 12              -- its size
local gcra = {code = 4}

local function gcra_pack(tat, back, born)
  local age = tat - born
  if back == 0 and born >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(GCRA_SHORT, tat, age)
  end
  return pack(GCRA_STATE, tat, back, born)
end

local function gcra_read(raw)
  if #raw == GCRA_SHORT_BYTES then
    local tat, age = sunpack(GCRA_SHORT, raw)
    return tat, 0, tat - age
  end
  local tat, back, born = sunpack(GCRA_STATE, raw)
  return tat, back, born
end

function gcra.load(raw, now, spec)
  if not raw then return {now, 0, now} end
  local tat, back, born = gcra_read(raw)
  if tat > now then return {tat, back, born} end
  return {now, 0, max(now, born + 1)}  -- full again: a new generation (gcra.py load)
end

function gcra.check(view, now, need, rule)
  local over = view[1] + need * rule.interval - now - rule.capacity * rule.interval
  if over > 0 then return over end
  return 0
end

function gcra.consume(view, now, cost, spec)
  return gcra_pack(view[1] + cost * spec.rules[1].interval, view[2], view[3])
end

function gcra.refund(view, now, cost, spec, mark)
  local tat = max(now, view[1] - give_back(view, now, cost, spec.rules[1].interval, mark))
  return gcra_pack(tat, next_back(view[2] + (view[1] - tat), view[3]))
end

function gcra.ttl(raw, now, spec)
  return sunpack(GCRA_SHORT, raw) - now  -- the tat leads both forms, the shorter fits both
end

function gcra.limited(rule, n, w)
  return metered(rule, n, w)
end

-- calendar --------------------------------------------------------------------------------
-- state: (period_start, count, born), packed as CALENDAR_STATE, counted as fixed-window's but
-- over calendar periods the specs name: CALENDAR_BOUNDS instants after the rules (the starts
-- of three periods and the last one's end), of which a call takes the one holding its now;
-- a count begun inside it is kept whatever period it was filed under (a recipient whose zone
-- changed; strategies/calendar.py says why)
local CALENDAR_STATE = '>I7I4I7'         -- period_start, count, born
local CALENDAR_SHORT = '>I7I2I5'         -- period_start, count, born - period_start
local calendar = {code = 5}
local CALENDAR_BOUNDS = 4
local CALENDAR_OUTSIDE = 'freqguard: calendar: time outside the periods the client sent'

local function period(now, spec)
  local b = spec.bounds
  for i = 1, #b - 1 do
    if b[i] <= now and now < b[i + 1] then return b[i], b[i + 1] end
  end
  error(CALENDAR_OUTSIDE .. ': ' .. format('%d', now), 0)
end

function calendar.load(raw, now, spec)
  local start, stop = period(now, spec)
  if raw then
    local stored, count, born = count_read(CALENDAR_STATE, CALENDAR_SHORT, raw)
    if stored == start or (start <= born and born < stop) then
      return {start, count, born, stop}
    end
  end
  return {start, 0, now, stop}
end

function calendar.check(view, now, need, rule)
  if view[2] + need <= rule.capacity then return 0 end
  return view[4] - now
end

function calendar.consume(view, now, cost, spec)
  return count_pack(CALENDAR_STATE, CALENDAR_SHORT, view[1], view[2] + cost, view[3])
end

function calendar.refund(view, now, cost, spec, mark)
  local count = max(0, view[2] - cost)
  if mark and tonumber(mark) ~= view[3] then count = view[2] end  -- not the hit's count
  return count_pack(CALENDAR_STATE, CALENDAR_SHORT, view[1], count, view[3])
end

function calendar.ttl(raw, now, spec)
  local _, stop = period(now, spec)
  return stop - now
end

function calendar.limited(rule, n, w)  -- a count per the rule's own period only
  if w ~= rule.window then return nil end
  return counted(rule, n, w)
end

-- quiet -----------------------------------------------------------------------------------
-- a policy's quiet hours, the pseudo-rule "quiet-hours": no state (nothing is stored); the
-- specs carry QUIET_BOUNDS numbers after its rule, the span the client computed and four
-- quiet intervals (0 0: none), and a hit inside one waits until it ends
local QUIET_STATE = '>'                  -- nothing
local quiet = {code = 6}
local QUIET_BOUNDS = 10
local QUIET_OUTSIDE = 'freqguard: quiet hours: time outside the span the client sent'

function quiet.load(raw, now, spec)
  local b = spec.bounds
  if now < b[1] or now >= b[2] then error(QUIET_OUTSIDE .. ': ' .. format('%d', now), 0) end
  for i = 3, #b, 2 do
    if b[i] <= now and now < b[i + 1] then return b[i + 1] end
  end
  return 0
end

function quiet.check(view, now, need, rule)
  if view > 0 then return view - now end
  return 0
end

function quiet.consume(view, now, cost, spec)
  return nil  -- quiet hours count nothing
end

function quiet.refund(view, now, cost, spec, mark)
  return nil
end

function quiet.ttl(raw, now, spec)
  return 0
end

function quiet.limited(rule, n, w)  -- no rate a limit could change
  return nil
end

-- specs -----------------------------------------------------------------------------------
-- The registry: each strategy's section under its code (one line each).
local TWINS = {
  [fixed_window.code] = fixed_window,
  [sliding_log.code] = sliding_log,
  [token_bucket.code] = token_bucket,
  [gcra.code] = gcra,
  [calendar.code] = calendar,
  [quiet.code] = quiet,
}
-- How many numbers follow a state's rules in the specs, by code (calendars and quiet hours).
local BOUNDS = {[calendar.code] = CALENDAR_BOUNDS, [quiet.code] = QUIET_BOUNDS}
local PARSED, PARSED_COUNT = {}, 0

-- ARGV_SPECS: the number of states, then per state the numbers of parse_state, each followed
-- by the numbers of parse_rule for each of its rules (freqguard/script/contract.py SPEC_STATE,
-- SPEC_RULE). Both return the next position.
local function parse_rule(v, at)
  return {capacity = v[at], window = v[at + 1], interval = v[at + 2], shadow = v[at + 3] == 1,
    tag = v[at + 4], reserve = v[at + 5], burst = v[at + 6]}, at + 7
end

-- A state's longest window and largest capacity, from its rules.
local function measure(spec)
  local window, cap = 0, 0
  for r = 1, #spec.rules do
    window, cap = max(window, spec.rules[r].window), max(cap, spec.rules[r].capacity)
  end
  spec.window, spec.cap = window, cap
  spec.width = log_width(window)        -- sliding logs: bytes per entry, and the
  spec.offset_range = 256 ^ spec.width  -- offsets they can hold
  return spec
end

-- A calendar state's periods, after its rules (CALENDAR_BOUNDS instants; none for others).
local function parse_bounds(code, v, at)
  local bounds = {}
  for b = 1, BOUNDS[code] or 0 do bounds[b] = v[at + b - 1] end
  return bounds, at + #bounds
end

local function parse_state(v, at)
  local spec = {code = v[at], shadow = v[at + 1] == 1, rule_count = v[at + 2], rules = {}}
  spec.twin, at = TWINS[spec.code], at + 3
  for r = 1, spec.rule_count do
    spec.rules[r], at = parse_rule(v, at)
  end
  spec.bounds, at = parse_bounds(spec.code, v, at)
  return measure(spec), at
end

local function parse_specs(text)
  local v, at = {}, 2
  for word in gmatch(text, '%S+') do v[#v + 1] = tonumber(word) end
  local specs, rules = {}, 0
  for k = 1, v[1] do
    specs[k], at = parse_state(v, at)
    rules = rules + specs[k].rule_count
  end
  specs.reply_format = REPLY_HEAD .. rep(REPLY_WAIT, rules)
  return specs
end

local function specs_of(text)  -- parsed once per text (all forgotten past 1024 texts)
  local specs = PARSED[text]
  if not specs then
    if PARSED_COUNT >= 1024 then PARSED, PARSED_COUNT = {}, 0 end
    specs = parse_specs(text)
    PARSED[text], PARSED_COUNT = specs, PARSED_COUNT + 1
  end
  return specs
end

-- per-key limits --------------------------------------------------------------------------
-- A record's limits follow RECORD_META in its meta field: one LIMIT_ENTRY each, read as
-- {tag, expiry, exempt, limit, window, capacity, interval}; expiry 0: never
-- (freqguard/script/limits.py).
local NO_LIMITS = {}

local function read_limits(meta)
  if not meta or #meta <= RECORD_META_BYTES then return NO_LIMITS end
  local entries = {}
  for at = RECORD_META_BYTES + 1, #meta, LIMIT_ENTRY_BYTES do
    local e = {sunpack(LIMIT_ENTRY, meta, at)}
    entries[#entries + 1] = {e[1], e[2], e[3], e[4], e[5], e[6], e[7]}
  end
  return entries
end

local function pack_limits(entries)
  local parts = {}
  for i = 1, #entries do
    local e = entries[i]
    parts[i] = pack(LIMIT_ENTRY, e[1], e[2], e[3], e[4], e[5], e[6], e[7])
  end
  return concat(parts)
end

local function lives(entry, now)
  return entry[2] == 0 or entry[2] > now
end

-- The latest expiry of a record's limits: 0 for none, NEVER if one never expires.
local function limits_until(entries)
  local latest = 0
  for i = 1, #entries do
    if entries[i][2] == 0 then return NEVER end
    latest = max(latest, entries[i][2])
  end
  return latest
end

-- The rule as a limit entry makes it decide (script/limits.py limited): at the rate stored
-- with it, as the rule's strategy reads rates now; exempt, as a shadow rule at its own
-- numbers; nil where the strategy cannot read that rate (it changed since the limit was set).
local function entry_rule(twin, rule, e)
  local made = twin.limited(rule, e[4], e[5])
  if made and e[3] == 1 then
    made = rule_at(rule, rule.capacity, rule.window, rule.interval)
    made.shadow = true
  end
  return made
end

-- One state's spec with its rules' live limits applied (script/limits.py _spec); the spec
-- itself when none applies. A lone exempt rule's state counts only what it admits.
local function limited_spec(spec, by_tag)
  local rules, found = {}, false
  for r = 1, #spec.rules do
    local rule = spec.rules[r]
    local e = by_tag[rule.tag]
    rules[r] = rule
    local made = e and entry_rule(spec.twin, rule, e)
    if made then
      rules[r] = made
      found = true
    end
  end
  if not found then return spec end
  local copy = {code = spec.code, twin = spec.twin, rule_count = spec.rule_count, rules = rules,
    bounds = spec.bounds}
  copy.shadow = spec.shadow or (#rules == 1 and rules[1].shadow)
  return measure(copy)
end

-- the record ------------------------------------------------------------------------------
-- A record is its own hash (KEYS[1]), or, when the call goes to the bucketed functions (the
-- library's last two; ARGV[1] the record's 8-byte id, the rest as above), one field of the
-- shared hash KEYS[1], which holds the same fields as one string in a compact form (see
-- Buckets). The id is no key: a key that never exists would make a node refuse the call
-- (TRYAGAIN) while its slot migrates. Everything below reads and writes a
-- record through these functions, on the hash itself or on the bucket's record, decoded once
-- a call (rec.map) and written back once (bucket_flush).

-- Buckets: a bucketed record's string is BLOB_HEAD (the mark LAYOUT_MARKS + BUCKET_LAYOUT,
-- the record's expiry), then the meta field's numbers as varints (fields, prune_at, number
-- of limits), its limits as stored, then one entry per state field: one byte (the name's
-- length, 2, 6, 10 or 14, as 0-3, + 4 x the entry's kind), the name, the field's expiry
-- and its span (expiry - latest) in 4 or 5 bytes, or its latest in full (ENTRY_HEADS),
-- the state's length in one byte or in four, and the state. An entry depends on nothing
-- else in the string: a call decodes only the fields it names and copies the rest as is.
local BLOB_HEAD = '>BI7'
local BUCKET_LAYOUT = 4                  -- a bucketed record's mark: LAYOUT_MARKS + this
local BUCKET_META = '>I8I4'              -- a bucket's field "": its expiry (NEVER: none), and
local BUCKET_FLOOR = 16                  -- the records it holds before stale ones are swept
local BUCKET_SLACK = 8                   -- a bucket's expiry, when extended, gains 1/8 more
-- an entry's kind: 2 x its head + its state length's (0: one byte, 1: four)
local ENTRY_HEADS = {[0] = 'I7I7', 'I7I4', 'I7I5'}
local HEAD_WIDTHS = {[0] = 14, 11, 12}   -- their sizes
local ENTRY_FORMATS = {}                 -- by kind: '>' .. head .. length .. 'c0' (see bind)

local function bind_entries()  -- on the first call, as bind()
  for head = 0, #ENTRY_HEADS do
    ENTRY_FORMATS[2 * head] = '>' .. ENTRY_HEADS[head] .. 'I1c0'
    ENTRY_FORMATS[2 * head + 1] = '>' .. ENTRY_HEADS[head] .. 'I4c0'
  end
end

local function varint(n)  -- n >= 0, 7 bits a byte, low first, the high bit on all but the last
  if n < 128 then return char(n) end  -- the usual case, without a table
  local out = {}
  while n >= 128 do
    local low = n % 128
    out[#out + 1] = char(low + 128)
    n = (n - low) / 128
  end
  out[#out + 1] = char(n)
  return concat(out)
end

local function varint_at(s, at)  -- the varint at `at`, and the position after it
  local n, scale = 0, 1
  while true do
    local b = byte(s, at)
    at = at + 1
    if b < 128 then return n + b * scale, at end
    n, scale = n + (b - 128) * scale, scale * 128
  end
end

-- The entry at `at`: its name, and where the next one starts (nothing decoded).
local function entry_at(blob, at)
  local flag = byte(blob, at)
  local code = flag % 4
  local kind = (flag - code) / 4
  local head = at + 3 + 4 * code
  local state = head + HEAD_WIDTHS[(kind - kind % 2) / 2]
  local size
  if kind % 2 == 0 then
    size, state = byte(blob, state), state + 1
  else
    local b1, b2, b3, b4 = byte(blob, state, state + 3)
    size, state = ((b1 * 256 + b2) * 256 + b3) * 256 + b4, state + 4
  end
  return sub(blob, at + 1, head - 1), state + size
end

-- The field the entry at `at` holds, as a hash holds it.
local function entry_field(blob, at)
  local flag = byte(blob, at)
  local code = flag % 4
  local kind = (flag - code) / 4
  local expiry, b, state = sunpack(ENTRY_FORMATS[kind], blob, at + 3 + 4 * code)
  if kind >= 2 then b = expiry - b end  -- b was the span
  return pack(FIELD_HEAD, expiry, b) .. state
end

-- One state field as a bucketed record holds it (see Buckets).
local function blob_entry(name, value)
  local expiry, latest = sunpack(FIELD_HEAD, value)
  local state = sub(value, FIELD_HEAD_BYTES + 1)
  local kind = #state < 256 and 0 or 1
  local span = expiry - latest
  local entry
  if span < 0 or span >= SHORT_SPAN then
    entry = pack(ENTRY_FORMATS[kind], expiry, latest, #state, state)
  else
    kind = kind + (span < 2 ^ 32 and 2 or 4)
    entry = pack(ENTRY_FORMATS[kind], expiry, span, #state, state)
  end
  local code = (#name - 2) / 4
  if code ~= floor(code) or code < 0 or code > 3 then
    error({err = 'ERR freqguard: a field name of ' .. #name .. ' bytes cannot be bucketed'})
  end
  return char(code + 4 * kind) .. name .. entry
end

-- A bucketed record's meta field and entries (see blob_read); fails on a string cut short.
local function blob_parse(blob)
  local _, expiry, at = sunpack(BLOB_HEAD, blob)
  local fields, prune_at, limits
  fields, at = varint_at(blob, at)
  prune_at, at = varint_at(blob, at)
  limits, at = varint_at(blob, at)
  local tail_end, size = at + limits * LIMIT_ENTRY_BYTES, #blob
  if tail_end > size + 1 then error('cut short') end
  local map = {[''] = pack(RECORD_META, LAYOUT_MARKS + RECORD_LAYOUT, expiry, fields, prune_at)
    .. sub(blob, at, tail_end - 1)}
  local entries, index, i = {}, {}, 0
  at = tail_end
  while at <= size do  -- entries[2i - 1] the name, entries[2i] where it starts
    local name, after = entry_at(blob, at)
    if after > size + 1 then error('cut short') end
    i = i + 1
    entries[2 * i - 1], entries[2 * i], index[name] = name, at, 2 * i
    at = after
  end
  entries[2 * i + 1], entries[2 * i + 2] = false, size + 1  -- where a next one would start
  return map, entries, index
end

-- A bucketed record: its meta field "" (rebuilt as RECORD_META marked with this release's
-- RECORD_LAYOUT, so the steps read it as they read a hash's), its entries in order (each
-- name, then where it starts), and where each name's start is in them; false for a string
-- of an older or unknown form, or cut short, which the call drops. A newer one fails the
-- call.
local function blob_read(key, blob)
  if not blob then return {}, {}, {} end
  local mark = byte(blob, 1)
  if mark ~= LAYOUT_MARKS + BUCKET_LAYOUT then
    if mark and mark > LAYOUT_MARKS + BUCKET_LAYOUT then
      error({err = format('ERR freqguard record in bucket %s is in layout %d, newer than the '
        .. '%d this release reads: upgrade freqguard on this client', key, mark - LAYOUT_MARKS,
        BUCKET_LAYOUT)})
    end
    return false
  end
  local ok, map, entries, index = pcall(blob_parse, blob)
  if not ok then return false end
  return map, entries, index
end

-- A bucketed record's string: its meta field, the entries no call changed as they were
-- (each run of them copied at once), then the fields it set.
local function blob_write(rec)
  local meta = rec.map['']
  local _, expiry, fields, prune_at = sunpack(RECORD_META, meta)
  local tail = sub(meta, RECORD_META_BYTES + 1)
  local parts = {pack(BLOB_HEAD, LAYOUT_MARKS + BUCKET_LAYOUT, expiry), varint(fields),
    varint(prune_at), varint(#tail / LIMIT_ENTRY_BYTES), tail}
  local entries, touched, from = rec.entries, rec.touched, false
  for i = 2, #entries - 2, 2 do
    if touched[entries[i - 1]] then
      if from then parts[#parts + 1] = sub(rec.blob, from, entries[i] - 1) end
      from = false
    else
      from = from or entries[i]
    end
  end
  if from then parts[#parts + 1] = sub(rec.blob, from, entries[#entries] - 1) end
  for name, value in pairs(rec.map) do
    if name ~= '' and touched[name] then parts[#parts + 1] = blob_entry(name, value) end
  end
  return concat(parts)
end

-- A bucketed record's expiry, or NEVER if a limit holds it for ever; fails on a string cut
-- short.
local function blob_expiry(blob)
  local _, expiry, at = sunpack(BLOB_HEAD, blob)
  local limits
  _, at = varint_at(blob, at)
  _, at = varint_at(blob, at)
  limits, at = varint_at(blob, at)
  for i = 0, limits - 1 do
    local _, until_ = sunpack(LIMIT_ENTRY, blob, at + i * LIMIT_ENTRY_BYTES)
    if until_ == 0 then return NEVER end
  end
  return expiry
end

-- How long a bucketed record is needed, on its calls' time: blob_expiry; false for a string
-- of an older or unknown form, or cut short (it goes); true for a newer release's (it stays,
-- unread, and holds nothing).
local function blob_until(blob)
  local mark = byte(blob, 1)
  if mark ~= LAYOUT_MARKS + BUCKET_LAYOUT then
    return mark ~= nil and mark > LAYOUT_MARKS + BUCKET_LAYOUT
  end
  local ok, until_ = pcall(blob_expiry, blob)
  return ok and until_
end

-- A record, and its fields named by the call (got[1] the meta field, got[i + 1] state i's;
-- false where absent). A bucketed one keeps in rec.map the fields it decoded or changed
-- (rec.touched: set or deleted), its other entries as they are.
local function open_record(keys, argv, n, rid)
  local key = keys[1]
  if not rid then
    return {key = key}, call('HMGET', key, '', tunpack(argv, ARGV_FIELDS, ARGV_FIELDS - 1 + n))
  end
  local pair = call('HMGET', key, '', rid)
  local rec = {key = key, rid = rid, bucket = pair[1], blob = pair[2], touched = {}}
  local map, entries, index = blob_read(key, pair[2])
  rec.map, rec.entries, rec.index, rec.unread = map or {}, entries or {}, index or {}, not map
  local got = {rec.map[''] or false}
  for i = 1, n do
    local name = argv[ARGV_FIELDS - 1 + i]
    local at = rec.index[name]
    got[i + 1] = at and entry_field(pair[2], rec.entries[at]) or false
    if at then rec.map[name] = got[i + 1] end
  end
  return rec, got
end

local function rec_all(rec)  -- HGETALL
  if not rec.rid then return call('HGETALL', rec.key) end
  local all, map, touched = {}, rec.map, rec.touched
  if map[''] then all = {'', map['']} end
  local entries = rec.entries
  for i = 2, #entries - 2, 2 do
    local name = entries[i - 1]
    if not touched[name] then
      all[#all + 1] = name
      all[#all + 1] = map[name] or entry_field(rec.blob, entries[i])
    end
  end
  for name, value in pairs(map) do
    if name ~= '' and touched[name] then
      all[#all + 1] = name
      all[#all + 1] = value
    end
  end
  return all
end

local function rec_drop_fields(rec, names)  -- HDEL
  if not rec.rid then
    call('HDEL', rec.key, tunpack(names))
    return
  end
  for i = 1, #names do rec.map[names[i]], rec.touched[names[i]] = nil, true end
  rec.dirty = true
end

local function rec_count(rec)  -- HLEN
  if not rec.rid then return call('HLEN', rec.key) end
  return #rec_all(rec) / 2
end

local function rec_delete(rec)  -- DEL
  if not rec.rid then
    call('DEL', rec.key)
    return
  end
  rec.map, rec.entries, rec.index, rec.touched, rec.dirty = {}, {}, {}, {}, true
end

local function rec_set(rec, sets)  -- HSET
  if not rec.rid then
    call('HSET', rec.key, tunpack(sets))
    return
  end
  for i = 1, #sets, 2 do rec.map[sets[i]], rec.touched[sets[i]] = sets[i + 1], true end
  rec.dirty = true
end

-- The record's TTL (ms), or (nil) for ever: a bucket keeps the longest its records need
-- (bucket_flush).
local function rec_expire(rec, ttl_ms)
  if not rec.rid then
    if ttl_ms then call('PEXPIRE', rec.key, ttl_ms) else call('PERSIST', rec.key) end
    return
  end
  rec.ttl_ms, rec.persist = ttl_ms, not ttl_ms
end

-- Fields whose expiry has passed no longer matter; they go once the record holds more than
-- prune_at fields, which then doubles what is left: amortized O(1) per write. Only on the
-- server's time: a pinned record goes whole, in real time (its TTL), as in the memory twin.
local function prune(rec, now)
  local all, stale = rec_all(rec), {}
  for i = 1, #all, 2 do
    local name = all[i]
    if name ~= '' and sunpack(FIELD_HEAD, all[i + 1]) <= now - STALE_GRACE then
      stale[#stale + 1] = name
    end
  end
  if #stale > 0 then rec_drop_fields(rec, stale) end
  local live = -#stale
  for i = 1, #all, 2 do
    if all[i] ~= '' then live = live + 1 end
  end
  return live
end

-- A bucket's deadline and TTL set afresh from its records. Where that cannot know every
-- record's need (a pinned time, a newer release's record, a lost meta field: `damaged`),
-- the TTL only grows. On the server's time, the
-- records whose time has passed (their expiry, or a limit's) go first, as stale fields do
-- in a record; a pinned time deletes nothing (it may come back to them). `real`: the
-- server's time, on which the deadline is kept.
local function sweep(key, clock, real, pinned, damaged)
  local all, stale, live, latest, newer = call('HGETALL', key), {}, 0, 0, false
  for i = 1, #all, 2 do
    if all[i] ~= '' then
      local until_ = blob_until(all[i + 1])
      if until_ == true then
        live, newer = live + 1, true
      elseif not pinned and (not until_ or until_ <= clock - STALE_GRACE) then
        stale[#stale + 1] = all[i]
      else
        live, latest = live + 1, max(latest, until_ or 0)
      end
    end
  end
  if #stale > 0 then call('HDEL', key, tunpack(stale)) end
  if live == 0 then
    call('DEL', key)
    return
  end
  local deadline = NEVER
  if latest < NEVER then
    local ttl = max(1, ceil((latest + STALE_GRACE - clock) / 1000))
    if pinned then ttl = ttl + PINNED_GRACE_MS end
    if pinned or newer or damaged then  -- what it knows may be short of what is needed:
      local now_ttl = call('PTTL', key)  -- it only extends (a TTL-less key gets one)
      if now_ttl > ttl then ttl = now_ttl end
    end
    deadline = real + 1000 * ttl
    call('PEXPIRE', key, ttl)
  else
    call('PERSIST', key)
  end
  call('HSET', key, '', pack(BUCKET_META, deadline, max(BUCKET_FLOOR, 2 * live)))
end

-- A bucketed record written back (or deleted); the bucket's TTL kept the longest its
-- records need, as a deadline on the server's time (a pinned call asks TIME for it), so
-- that no write, pinned or not, in or out of order, shortens it; the bucket swept when it
-- has grown past its prune_at, or set afresh (`recompute`) when a change of limits or a
-- dropped record may have ended what held it for ever.
local function bucket_flush(rec, clock, pinned, recompute)
  if not rec.rid or not rec.dirty then return end
  local key, rid = rec.key, rec.rid
  local known, deadline, prune_at = false, 0, BUCKET_FLOOR
  if rec.bucket then known, deadline, prune_at = pcall(sunpack, BUCKET_META, rec.bucket) end
  if not known or deadline > NEVER then deadline, prune_at, known = 0, BUCKET_FLOOR, false end
  local real = clock
  if pinned then
    local t = call('TIME')
    real = t[1] * 1000000 + t[2]
  end
  local grows = false
  if not rec.map[''] then  -- deleted (a record's meta field goes only with the record)
    if rec.blob then
      call('HDEL', key, rid)
      local left = call('HLEN', key)
      if left == 0 or (left == 1 and known) then  -- nothing but its meta field
        call('DEL', key)
        return
      end
    end
  else
    grows = call('HSET', key, rid, blob_write(rec)) == 1
  end
  -- a meta field missing (beside other records) or unreadable: its deadline is unknown
  local damaged = not known and (rec.bucket or call('HLEN', key) > 1)
  if recompute or damaged or (grows and not pinned and call('HLEN', key) - 1 > prune_at) then
    sweep(key, clock, real, pinned, damaged)
  elseif rec.persist and deadline < NEVER then
    call('PERSIST', key)
    call('HSET', key, '', pack(BUCKET_META, NEVER, prune_at))
  elseif rec.ttl_ms and real + 1000 * rec.ttl_ms > deadline then  -- with slack of its own:
    local slack = ceil(rec.ttl_ms / BUCKET_SLACK)  -- most records' writes then keep it
    call('PEXPIRE', key, rec.ttl_ms + slack)
    call('HSET', key, '', pack(BUCKET_META, real + 1000 * (rec.ttl_ms + slack), prune_at))
  elseif not known then
    call('HSET', key, '', pack(BUCKET_META, deadline, prune_at))
  end
end

-- the policy function's steps (freqguard/script/twin.py has the same, in the same order) ----------

-- The time the call is judged at: no earlier than any of its states was written at.
local function judged_at(got, n, now)
  for i = 1, n do
    if got[i + 1] then
      local _, latest = sunpack(FIELD_HEAD, got[i + 1])
      if latest > now then now = latest end
    end
  end
  return now
end

-- The record's per-key limits after the call (script/twin.py change_limits): as stored, but
-- for a LIMIT call with a change: the number of tags it keeps and those tags (every rule of
-- the policy), then either one rule's limit to set (tag, ttl µs from now or 0 for ever,
-- exempt, limit, window, capacity, interval) or its tag alone, to clear it. A change also
-- drops the limits of tags it does not keep, those of this call's rules that their strategy
-- cannot read any more and, on the server's time, the expired ones. Also returns whether
-- they changed.
local function change_limits(meta, change, mode, now, pinned, specs)
  local entries = read_limits(meta)
  if mode ~= LIMIT or change == '' then return entries, false end
  local words, keep, own, kept = {}, {}, {}, {}
  for word in gmatch(change, '%S+') do words[#words + 1] = tonumber(word) end
  local count = words[1]
  for i = 2, count + 1 do keep[words[i]] = true end
  local tag = words[count + 2]
  for k = 1, #specs do
    local rules = specs[k].rules
    for r = 1, #rules do own[rules[r].tag] = {specs[k].twin, rules[r]} end
  end
  for i = 1, #entries do
    local e, mine = entries[i], own[entries[i][1]]
    if e[1] ~= tag and keep[e[1]] and (pinned or lives(e, now))
      and (not mine or entry_rule(mine[1], mine[2], e)) then kept[#kept + 1] = e end
  end
  if #words > count + 2 then
    local w, expiry = count + 2, 0
    if words[w + 1] > 0 then expiry = now + words[w + 1] end
    kept[#kept + 1] = {tag, expiry, words[w + 2], words[w + 3], words[w + 4], words[w + 5],
      words[w + 6]}
  end
  return kept, true
end

-- RESET: every stored state is deleted (false). On a pinned time, where the next call may
-- come at the very microsecond of a hit before the reset, the reset ends its microsecond: in
-- place of each state an expired marker of no state ('') written 1 µs after the latest time
-- of the call, so that what comes after is judged at least that late and no receipt from
-- before the reset can match it. Returns the states' fate and the time.
local function reset_states(got, n, now, pinned)
  local after, at = {}, now
  if pinned then at = judged_at(got, n, now) + 1 end
  for i = 1, n do
    if got[i + 1] then after[i] = pinned and '' or false end
  end
  return after, at
end

-- The specs as decided: each rule a limit living at now names, at its numbers.
local function apply_limits(specs, entries, now)
  if #entries == 0 then return specs end
  local by_tag, found = {}, false
  for i = 1, #entries do
    if lives(entries[i], now) then by_tag[entries[i][1]], found = entries[i], true end
  end
  if not found then return specs end
  local out = {reply_format = specs.reply_format}
  for k = 1, #specs do out[k] = limited_spec(specs[k], by_tag) end
  return out
end

-- Each state at now, from its field: a state past its expiry (or being reset) is absent.
-- Also returns, per state, the packed state stored (false: none) and its field's expiry.
local function load_states(specs, got, now, mode)
  local views, raws, expiries = {}, {}, {}
  for i = 1, #specs do
    local spec, field = specs[i], got[i + 1]
    local raw = false
    if field and mode ~= RESET then
      expiries[i] = sunpack(FIELD_HEAD, field)
      if expiries[i] > now then raw = sub(field, FIELD_HEAD_BYTES + 1) end
    end
    raws[i] = raw
    views[i] = spec.twin.load(raw or nil, now, spec)
  end
  return views, raws, expiries
end

-- REFUND: each stored state gives back cost units: exactly what the hit of its mark took,
-- none where that hit took nothing (mark ""), the newest units when no marks were sent.
local function refund_states(specs, views, after, raws, argv, now, cost)
  local n = #specs
  for i = 1, n do
    local spec, mark = specs[i], argv[ARGV_FIELDS - 1 + n + i]
    if raws[i] and mark ~= '' then
      after[i] = spec.twin.refund(views[i], now, cost, spec, mark)
      views[i] = spec.twin.load(after[i], now, spec)
    end
  end
end

-- Every rule's wait (µs until it admits a hit of need; 0: it does), in spec order, and
-- whether no non-shadow rule denies.
local function check_rules(specs, views, now, need)
  local waits, allowed = {}, true
  for i = 1, #specs do
    local check, view, rules = specs[i].twin.check, views[i], specs[i].rules
    for r = 1, #rules do
      local rule = rules[r]
      local wait = 1  -- SKIP: the rule does not apply to this hit (strategies/base.py)
      if rule.reserve >= 0 then wait = check(view, now, need + rule.reserve, rule) end
      waits[#waits + 1] = wait
      if wait > 0 and not rule.shadow then allowed = false end
    end
  end
  return waits, allowed
end

-- HIT, allowed: every state consumes, but a shadow rule's own state only if it admits.
local function consume_states(specs, views, after, waits, now, cost)
  local first = 1
  for i = 1, #specs do
    local spec = specs[i]
    if not spec.shadow or waits[first] == 0 then
      after[i] = spec.twin.consume(views[i], now, cost, spec)
    end
    first = first + #spec.rules
  end
end

-- The fields to set (each changed state behind its expiry and now; a refund keeps the
-- expiry: it only shrinks what can matter; a reset's marker is expired as it is written)
-- and to delete; the latest expiry set; how many fields are new.
local function changes(specs, after, got, argv, expiries, now, mode)
  local sets, drops, latest, added = {}, {}, 0, 0
  for i = 1, #specs do
    local state = after[i]
    if state then
      local spec = specs[i]
      local expiry = now  -- a reset's marker
      if mode == REFUND then
        expiry = expiries[i]
      elseif mode ~= RESET then
        expiry = now + spec.twin.ttl(state, now, spec)
      end
      sets[#sets + 1] = argv[ARGV_FIELDS - 1 + i]
      sets[#sets + 1] = pack(FIELD_HEAD, expiry, now) .. state
      if expiry > latest then latest = expiry end
      if not got[i + 1] then added = added + 1 end
    elseif state == false then
      drops[#drops + 1] = argv[ARGV_FIELDS - 1 + i]
    end
  end
  return sets, drops, latest, added
end

-- The record's expiry after a write of that latest expiry, and its TTL (ms) when it must be
-- set (nil: the current one still covers every field).
local function record_ttl(record_expiry, latest, now, clock, pinned)
  if pinned then
    record_expiry = max(record_expiry, latest)
    return record_expiry, ceil((record_expiry + STALE_GRACE - clock) / 1000) + PINNED_GRACE_MS
  end
  if latest > record_expiry then
    record_expiry = latest + floor((latest - now) / 32)  -- slack: most writes keep the TTL
    return record_expiry, ceil((record_expiry + STALE_GRACE - clock) / 1000)
  end
  return record_expiry, nil
end

-- The latest expiry of a record's state fields (a change of its limits reads them all).
local function fields_expiry(rec)
  local all, latest = rec_all(rec), 0
  for i = 1, #all, 2 do
    if all[i] ~= '' then latest = max(latest, sunpack(FIELD_HEAD, all[i + 1])) end
  end
  return latest
end

-- The record's expiry and TTL (ms; nil: keep it) when its limits hold it until `held`
-- (NEVER: no TTL; PERSIST after a change). A change of limits sets the TTL afresh, from
-- what the states need and what the limits do.
local function limits_ttl(rec, record_expiry, latest, held, now, clock, pinned, changed)
  if changed then record_expiry = fields_expiry(rec) end
  if held >= NEVER then  -- the states' expiry is kept (with slack) for when no limit holds
    if changed then rec_expire(rec, nil) end
    return (record_ttl(record_expiry, latest, now, clock, false)), nil
  end
  if changed then
    return record_ttl(0, max(record_expiry, latest, held), now, clock, pinned)
  end
  return record_ttl(record_expiry, max(latest, held), now, clock, pinned)
end

-- Write: the changed fields, the meta field (with the limits, `tail`), the record's TTL; an
-- emptied record without limits goes.
local function write_record(rec, got, sets, drops, latest, added, now, clock, pinned, lim)
  if #sets == 0 and #drops == 0 and not lim.changed then return end
  local meta, mark, record_expiry, fields, prune_at = got[1], 0, 0, 0, PRUNE_FLOOR
  if meta then mark, record_expiry, fields, prune_at = sunpack(RECORD_META, meta) end
  if #drops > 0 then rec_drop_fields(rec, drops) end
  fields = fields + added - #drops
  if #sets == 0 and fields <= 0 then fields = rec_count(rec) - 1 end
  if #sets == 0 and fields <= 0 and lim.tail == '' then
    rec_delete(rec)
    return
  end
  if fields > prune_at and not pinned then  -- pinned records go in real time (their TTL)
    if #sets > 0 then rec_set(rec, sets) end
    sets, fields = {}, prune(rec, clock)
    prune_at = max(PRUNE_FLOOR, 2 * fields)
  end
  local ttl_ms, given = nil, record_expiry
  if lim.tail == '' and not lim.changed then
    record_expiry, ttl_ms = record_ttl(record_expiry, latest, now, clock, pinned)
  else
    local held = limits_until(lim.entries)
    record_expiry, ttl_ms = limits_ttl(rec, record_expiry, latest, held, now, clock, pinned,
      lim.changed)
  end
  if ttl_ms or record_expiry ~= given or added > 0 or #drops > 0 or not meta or lim.changed
    or mark ~= LAYOUT_MARKS + RECORD_LAYOUT then  -- an older layout's record: marked anew
    sets[#sets + 1] = ''
    sets[#sets + 1] = pack(RECORD_META, LAYOUT_MARKS + RECORD_LAYOUT, record_expiry,
      max(fields, 0), prune_at) .. lim.tail
  end
  if #sets > 0 then rec_set(rec, sets) end
  if ttl_ms then rec_expire(rec, max(1, ttl_ms)) end
end

-- The reply: the decision, then every state as the call leaves it, then the limits if any.
local function reply(specs, allowed, now, waits, after, raws, tail, found)
  local flags = (allowed and 1 or 0) + found
  if tail ~= '' then flags = flags + REPLY_LIMITS end
  local out = {pack(specs.reply_format, flags, now, tunpack(waits))}
  for i = 1, #specs do
    local state = after[i]
    if state == nil then
      state = raws[i] or ''
    elseif state == false then
      state = ''
    end
    out[i + 1] = pack(REPLY_STATE_LENGTH, #state) .. state
  end
  out[#specs + 2] = tail
  return concat(out)
end

-- The limits as the call leaves them: what to store after RECORD_META (`tail`), and whether
-- it changed.
local function limits_of(meta, entries, changed)
  local tail = ''
  if changed then
    tail = pack_limits(entries)
  elseif meta and #meta > RECORD_META_BYTES then
    tail = sub(meta, RECORD_META_BYTES + 1)
  end
  return {entries = entries, tail = tail, changed = changed}
end

-- The record's layout (see Layout in the header): 0 when it is absent or in this layout;
-- REPLY_DROPPED when it had no mark (or an unreadable one), after deleting it and emptying
-- `got` (its HMGET), so the call decides as if it were absent. A record of a newer layout
-- fails the call, which changes nothing.
local function check_layout(rec, got, n)
  if rec.unread then  -- a bucketed record's string it could not read (got is all false)
    rec_delete(rec)
    return REPLY_DROPPED
  end
  local meta = got[1]
  if meta then
    local mark = byte(meta, 1)
    if mark >= LAYOUT_MARKS + OLDEST_LAYOUT and mark <= LAYOUT_MARKS + RECORD_LAYOUT
      and (#meta - RECORD_META_BYTES) % LIMIT_ENTRY_BYTES == 0 then
      return 0
    elseif mark > LAYOUT_MARKS + RECORD_LAYOUT then
      error({err = format('ERR freqguard record %s is in layout %d, newer than the %d this '
        .. 'release reads: upgrade freqguard on this client', rec.key, mark - LAYOUT_MARKS,
        RECORD_LAYOUT)})
    end
  else
    local found = false
    for i = 2, n + 1 do found = found or got[i] ~= false end
    if not found then return 0 end
  end
  rec_delete(rec)
  for i = 1, n + 1 do got[i] = false end
  return REPLY_DROPPED
end

-- the policy function (freqguard/script/twin.py: run) ------------------------------------------
local function run(keys, argv, rid)
  local pinned, now = argv[ARGV_NOW] ~= '', tonumber(argv[ARGV_NOW])
  if not pinned then
    local t = call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  local clock = now  -- the caller's or the server's time: expiries are set on it
  local cost, mode = tonumber(argv[ARGV_COST]), tonumber(argv[ARGV_MODE])
  local specs = specs_of(argv[ARGV_SPECS])
  local n = #specs
  local rec, got = open_record(keys, argv, n, rid)
  local found = check_layout(rec, got, n)
  -- per state: the packed state to store ('' a reset's marker), false to delete, nil to keep
  local after = {}
  if mode ~= RESET then now = judged_at(got, n, now) end
  local change = mode == LIMIT and argv[ARGV_FIELDS + n] or ''
  local entries, changed = change_limits(got[1], change, mode, now, pinned, specs)
  if mode == RESET then after, now = reset_states(got, n, now, pinned) end
  specs = apply_limits(specs, entries, now)
  local views, raws, expiries = load_states(specs, got, now, mode)
  if mode == REFUND then refund_states(specs, views, after, raws, argv, now, cost) end
  local waits, allowed = check_rules(specs, views, now, cost > 0 and cost or 1)
  if mode == HIT and allowed and cost > 0 then
    consume_states(specs, views, after, waits, now, cost)
  end
  local sets, drops, latest, added = changes(specs, after, got, argv, expiries, now, mode)
  local lim = limits_of(got[1], entries, changed)
  write_record(rec, got, sets, drops, latest, added, now, clock, pinned, lim)
  bucket_flush(rec, clock, pinned, lim.changed or rec.unread)
  return reply(specs, allowed, now, waits, after, raws, lim.tail, found)
end

local bound = false

local function policy(keys, argv, rid)
  if not bound then
    bind()
    bind_entries()
    bound = true
  end
  return run(keys, argv, rid)
end

local function nogrow(keys, argv, rid)
  local mode = tonumber(argv[ARGV_MODE])
  if (mode == HIT or mode == LIMIT) and tonumber(argv[ARGV_COST]) > 0 then  -- grows
    return redis.error_reply('ERR a call that grows cannot run as a _nogrow function')
  end
  return policy(keys, argv, rid)
end

-- A bucketed call: its ARGV[1] is the record's id, the rest the ARGV above.
local function bucketed(callback)
  return function(keys, argv)
    local rest = {}
    for i = ARGV_RECORD + 1, #argv do rest[i - ARGV_RECORD] = argv[i] end
    return callback(keys, rest, argv[ARGV_RECORD])
  end
end

-- The policy function under two names, and the bucketed one under two more. Redis refuses a
-- function that may write once used memory is past maxmemory, unless it is flagged
-- allow-oom: the first name, for hits, is refused then (a full server takes no new state);
-- the second (freqguard/backends/_library.py: FUNCTION_NOGROW) serves the calls that never
-- grow what is stored, CHECK, REFUND, RESET and a HIT of cost 0, so a full server can still
-- be read, refunded and emptied. It refuses a hit that would consume, whoever calls it.
redis.register_function('__LIBRARY__', function(keys, argv) return policy(keys, argv) end)
redis.register_function{
  function_name = '__LIBRARY___nogrow',
  callback = function(keys, argv) return nogrow(keys, argv) end,
  flags = {'allow-oom'},
}
redis.register_function('__LIBRARY___bucket', bucketed(policy))
redis.register_function{
  function_name = '__LIBRARY___bucket_nogrow',
  callback = bucketed(nogrow),
  flags = {'allow-oom'},
}
