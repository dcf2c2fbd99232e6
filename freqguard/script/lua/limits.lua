-- Per-key limits: the Lua beside freqguard/script/limits.py.
-- A record's limits follow RECORD_META in its meta field: one LIMIT_ENTRY each, read as
-- {tag, expiry, exempt, limit, window, capacity, interval}; expiry 0: never
-- (freqguard/script/limits.py).
local NEVER = 2 ^ 60  -- the expiry of what never expires (a limit, a bin's; Lua only)
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
-- itself when none applies. A lone exempt rule's state counts only what it admits. A log
-- (its twin keeps_own) keeps what its own rules need too (the longer window, the larger
-- count): a stricter limit never makes it forget what they count once it is gone.
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
  -- what a tier asks the state to remember stays as the tier asked it, a limit's numbers
  -- aside (script/limits.py _spec)
  local copy = {code = spec.code, twin = spec.twin, rule_count = spec.rule_count, rules = rules,
    bounds = spec.bounds, base_window = spec.base_window, base_cap = spec.base_cap,
    keep_window = spec.keep_window, keep_cap = spec.keep_cap}
  copy.shadow = spec.shadow or (#rules == 1 and rules[1].shadow)
  return measure(copy, spec.twin.keeps_own and spec or nil)
end
