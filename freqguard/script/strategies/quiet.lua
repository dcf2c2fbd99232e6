-- quiet: the Lua twin of freqguard/script/strategies/quiet.py; its code, format, bounds
-- and error are in lua/contract.lua (from the module).
-- a policy's quiet hours, the pseudo-rule "quiet-hours": no state (nothing is stored,
-- QUIET_STATE); the specs carry BOUNDS[quiet.code] numbers after its rule, the span the
-- client computed and four quiet intervals (0 0: none), and a hit inside one waits until
-- it ends

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
