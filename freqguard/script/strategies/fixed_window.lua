-- fixed-window: the Lua twin of freqguard/script/strategies/fixed_window.py; its code and
-- formats are in lua/contract.lua (from the module).
-- state: (window_start, count, born), packed as FIXED_WINDOW_STATE (window_start, count,
-- born), or FIXED_WINDOW_SHORT (window_start, count, born - window_start); born: when this
-- window's count began, which a refund's mark must name (a count begun again after a reset
-- is another)

function fixed_window.load(raw, now, spec)
  local start = now - now % spec.rules[1].window
  if raw then
    local stored, count, born = count_read(FIXED_WINDOW_STATE, FIXED_WINDOW_SHORT,
      fixed_window.short_bytes, raw)
    if stored == start then return {start, count, born} end
    return {start, 0, max(now, born + 1)}  -- a new count, born after the one before
  end
  return {start, 0, now}
end

function fixed_window.newest(raw)  -- its count's birth (a reset ends after it)
  local _, _, born = count_read(FIXED_WINDOW_STATE, FIXED_WINDOW_SHORT,
    fixed_window.short_bytes, raw)
  return born
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
