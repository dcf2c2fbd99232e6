-- What the strategies share (the Lua beside freqguard/script/strategies/base.py): a rule as
-- a per-key limit makes it decide, the counted states' short form (fixed-window's and
-- calendar's), and the buckets' refunds (token-bucket's and gcra's; in Python gcra.py's,
-- which token_bucket.py imports). Each strategy's own file fills its table
-- (lua/contract.lua) with the functions of contract.py TWIN_FUNCTIONS, in that order.

-- A rule as a per-key limit of n per w µs makes it decide (strategies/base.py counted and
-- metered): a count of n per window w, or a bucket of one token per w / n µs (rounded up)
-- that keeps the rule's own burst; nil where the numbers cannot be (past a bucket's bound).
-- An EVAL script's strategies, each defined when a call's specs first name it (by code:
-- script/library.py scripts, which defers them; a Redis Function defines them all at load,
-- and this stays empty).
local DEFERRED = {}

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

-- A state stored short (each strategy's <NAME>_SHORT, told from its full form by its
-- length) holds born as its distance from the time before it, in 5 bytes, and no back (a
-- bucket's: 0 until a refund); a window's count in 2 bytes. Beyond these, or with a time
-- below 0 (a calendar period begun before 1970, read back as the full form reads it), the
-- full form: both read back the same numbers.

-- A counted state (start, count, born), fixed-window's or calendar's, as stored: short
-- while the count fits and born is at most SHORT_SPAN after start, else in full.
local function count_pack(full, short, start, count, born)
  local age = born - start
  if count < SHORT_COUNT and start >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(short, start, count, age)
  end
  return pack(full, start, count, born)
end

-- The same, read back: the short form is told by its size (short_bytes).
local function count_read(full, short, short_bytes, raw)
  if #raw == short_bytes then
    local start, count, age = sunpack(short, raw)
    return start, count, start + age
  end
  local start, count, born = sunpack(full, raw)
  return start, count, born
end

-- A bucket's mark: tat, back and born (and the interval the hit was charged at), joined by
-- MARK_SEPARATOR.
local MARK_PATTERN = '^(%d+)' .. MARK_SEPARATOR .. '(%d+)' .. MARK_SEPARATOR .. '(%d+)'

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
