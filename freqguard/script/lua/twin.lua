-- The policy function's steps and the function itself (run): the Lua twin of
-- freqguard/script/twin.py, which has the same steps (contract.py RUN_STEPS), in the same
-- order, and a run that calls them in that order. The Lua's own (changes, reply, limits_of)
-- frame what the Python twin's store and Reply do; writing the record is lua/records.lua's.

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
-- exempt, limit, window, capacity, interval, and the keying of the keying entry stored
-- beside it: KEYING_WINDOW) or its tag alone, to clear it; either drops that limit's keying
-- entries. A change also drops the limits of tags it does not keep, those of this call's
-- rules that their strategy cannot read any more and, on the server's time, the expired
-- ones; a keying entry goes with its limit, never left alone. Also returns whether they
-- changed.
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
  local tags = {}  -- the limits kept; a keying entry goes with its limit
  for i = 1, #entries do
    local e, mine = entries[i], own[entries[i][1]]
    if (pinned or lives(e, now)) and e[5] ~= KEYING_WINDOW and e[1] ~= tag and keep[e[1]]
      and (not mine or entry_rule(mine[1], mine[2], e)) then tags[e[1]] = true end
  end
  for i = 1, #entries do
    local e = entries[i]
    if (pinned or lives(e, now)) and tags[e[5] == KEYING_WINDOW and e[4] or e[1]] then
      kept[#kept + 1] = e
    end
  end
  if #words > count + 2 then
    local w, expiry = count + 2, 0
    if words[w + 1] > 0 then expiry = now + words[w + 1] end
    kept[#kept + 1] = {tag, expiry, words[w + 2], words[w + 3], words[w + 4], words[w + 5],
      words[w + 6]}
    kept[#kept + 1] = {words[w + 7], expiry, 0, tag, KEYING_WINDOW, 0, 0}  -- its keying
  end
  return kept, true
end

-- RESET: every stored state is deleted (false). On a pinned time, where the next call may
-- come at the very microsecond of a hit before the reset, the reset ends its microsecond: in
-- place of each state an expired tombstone (no state, '') written 1 µs after the latest time
-- of the call, or after a later time a state names (a count, ring or bucket born after its
-- call's time: twin.newest), so that what comes after is judged at least that late and no
-- receipt from before the reset can match it. Returns the states' fate and the time.
local function reset_states(specs, got, n, now, pinned)
  local after, at = {}, now
  if pinned then
    at = judged_at(got, n, now)
    for i = 1, n do
      local newest, field = specs[i].twin.newest, got[i + 1]
      if newest and field and #field > FIELD_HEAD_BYTES then
        at = max(at, newest(sub(field, FIELD_HEAD_BYTES + 1)))
      end
    end
    at = at + 1
  end
  for i = 1, n do
    if got[i + 1] then after[i] = pinned and '' or false end
  end
  return after, at
end

-- The specs as decided: each rule a limit living at now names, at its numbers.
local function apply_limits(specs, entries, now)
  if #entries == 0 then return specs end
  local by_tag, keyed, found, any_keyed = {}, {}, false, false
  for i = 1, #entries do
    local e = entries[i]
    if lives(e, now) then
      by_tag[e[1]], found = e, true
      if e[5] == KEYING_WINDOW then keyed[e[4]], any_keyed = true, true end
    end
  end
  if not found then return specs end
  if any_keyed then  -- a limit set for another dimension's value is not this rule's
    for k = 1, #specs do
      local rules = specs[k].rules
      for r = 1, #rules do
        local rule = rules[r]
        if keyed[rule.tag] and not by_tag[rule.keying] then by_tag[rule.tag] = nil end
      end
    end
  end
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
-- expiry: it only shrinks what can matter; a reset's tombstone is expired as it is written)
-- and to delete; the latest expiry set; how many fields are new.
local function changes(specs, after, got, argv, expiries, now, mode)
  local sets, drops, latest, added = {}, {}, 0, 0
  for i = 1, #specs do
    local state = after[i]
    if state then
      local spec = specs[i]
      local expiry = now  -- a reset's tombstone
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

-- the policy function (freqguard/script/twin.py: run) ------------------------------------------
local function run(keys, argv, rid)
  local pinned, now = argv[ARGV_NOW] ~= '', tonumber(argv[ARGV_NOW])
  if not pinned then
    local t = call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  local clock = now  -- the caller's or the server's time: expiries are set on it
  local cost, mode = tonumber(argv[ARGV_COST]), tonumber(argv[ARGV_MODE])
  if mode == CLAIM then return claim_bin(keys[1], rid) end  -- a bin claimed (bins.lua)
  local specs = specs_of(argv[ARGV_SPECS])
  local n = #specs
  local rec, got = open_record(keys, argv, n, rid, mode == RESET or mode ~= CHECK and cost > 0,
    mode == RESET)
  local found = check_layout(rec, got, n)
  -- per state: the packed state to store ('' a reset's tombstone), false to delete, nil to keep
  local after = {}
  if mode ~= RESET then now = judged_at(got, n, now) end
  local change = mode == LIMIT and argv[ARGV_FIELDS + n] or ''
  local entries, changed = change_limits(got[1], change, mode, now, pinned, specs)
  if mode == RESET then after, now = reset_states(specs, got, n, now, pinned) end
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
  if rec.rid then bin_flush(rec, clock, pinned, lim.changed or rec.unread) end
  return reply(specs, allowed, now, waits, after, raws, lim.tail, found)
end
