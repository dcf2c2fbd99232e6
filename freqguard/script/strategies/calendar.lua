-- calendar: the Lua twin of freqguard/script/strategies/calendar.py; its code, formats,
-- bounds and error are in lua/contract.lua (from the module).
-- state: (period_start, count, born), packed as CALENDAR_STATE (period_start, count, born),
-- or CALENDAR_SHORT (period_start, count, born - period_start), counted as fixed-window's
-- but over calendar periods the specs name: BOUNDS[calendar.code] instants after the rules
-- (the starts of three periods and the last one's end), of which a call takes the one
-- holding its now; a count begun inside it is kept whatever period it was filed under (a
-- recipient whose zone changed; strategies/calendar.py says why)

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
    local stored, count, born = count_read(CALENDAR_STATE, CALENDAR_SHORT,
      calendar.short_bytes, raw)
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
