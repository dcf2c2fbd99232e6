-- gcra: the Lua twin of freqguard/script/strategies/gcra.py; its code and formats are in
-- lua/contract.lua (from the module).
-- state: the theoretical arrival time, what refunds moved it back since the state was born,
-- and when that was: (tat, back, born), packed as GCRA_STATE (tat, back, born), or
-- GCRA_SHORT (tat, tat - born; back 0)

local function gcra_pack(tat, back, born)
  local age = tat - born
  if back == 0 and born >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(GCRA_SHORT, tat, age)
  end
  return pack(GCRA_STATE, tat, back, born)
end

local function gcra_read(raw)
  if #raw == gcra.short_bytes then
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

function gcra.newest(raw)  -- its generation's birth (a reset ends after it)
  local _, _, born = gcra_read(raw)
  return born
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
