-- The specs (ARGV_SPECS), parsed: the Lua beside how freqguard/script/calls.py writes them
-- (spec_text, from contract.py SPEC_STATE and SPEC_RULE). Each state's twin is found in
-- TWINS under its code, and the numbers after its rules by BOUNDS (both in lua/contract.lua,
-- generated from the Python registry).
local PARSED, PARSED_COUNT = {}, 0

-- ARGV_SPECS: the number of states, then per state the numbers of parse_state, each followed
-- by the numbers of parse_rule for each of its rules (freqguard/script/contract.py SPEC_STATE,
-- SPEC_RULE). Both return the next position.
local function parse_rule(v, at)
  return {capacity = v[at], window = v[at + 1], interval = v[at + 2], shadow = v[at + 3] == 1,
    tag = v[at + 4], reserve = v[at + 5], burst = v[at + 6], keying = v[at + 7]}, at + 8
end

-- A state's longest window and largest capacity, from its rules and `own`'s: the spec's
-- text (under a tier of a shorter window it keeps the rule's own), or, for a state under
-- per-key limits, its own spec's.
local function measure(spec, own)
  local window, cap = 0, 0
  if own then window, cap = own.window, own.cap end
  for r = 1, #spec.rules do
    window, cap = max(window, spec.rules[r].window), max(cap, spec.rules[r].capacity)
  end
  spec.window, spec.cap = window, cap
  spec.width = log_width(window)        -- sliding logs: bytes per entry, and the
  spec.offset_range = 256 ^ spec.width  -- offsets they can hold
  return spec
end

-- A calendar state's periods (or the quiet hours' span and intervals), after its rules
-- (BOUNDS[code] numbers; none for others).
local function parse_bounds(code, v, at)
  local bounds = {}
  for b = 1, BOUNDS[code] or 0 do bounds[b] = v[at + b - 1] end
  return bounds, at + #bounds
end

local function parse_state(v, at)
  local spec = {code = v[at], shadow = v[at + 1] == 1, rule_count = v[at + 2],
    window = v[at + 3], cap = v[at + 4], rules = {}}
  -- the words as written: what every call of the state keeps (a log or a rolling window
  -- remembers what a call kept past them: StateSpec.keep_window)
  spec.base_window, spec.base_cap = spec.window, spec.cap
  local define = DEFERRED[spec.code]  -- an EVAL script's strategy, defined on first use
  if define then
    DEFERRED[spec.code] = nil
    define()
  end
  spec.twin, at = TWINS[spec.code], at + 5
  for r = 1, spec.rule_count do
    spec.rules[r], at = parse_rule(v, at)
  end
  spec.bounds, at = parse_bounds(spec.code, v, at)
  measure(spec, spec)  -- what it keeps: at least what its rules need
  -- what its rules (a tier's) keep past the words, which a log or a rolling window remembers
  -- (StateSpec.keep_window; a per-key limit leaves it as it is: limits.lua limited_spec)
  spec.keep_window = spec.window > spec.base_window and spec.window or 0
  spec.keep_cap = spec.cap > spec.base_cap and spec.cap or 0
  return spec, at
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
