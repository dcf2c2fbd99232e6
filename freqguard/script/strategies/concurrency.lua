-- concurrency: the Lua twin of freqguard/script/strategies/concurrency.py; its code and
-- format are in lua/contract.lua (from the module). The state is a sliding log of the
-- times the held leases were taken at, with the lease as its window, on a state of the
-- rule's own: the log's functions.
function concurrency.load(raw, now, spec)
  return sliding_log.load(raw, now, spec)
end

function concurrency.check(view, now, need, rule)
  return sliding_log.check(view, now, need, rule)
end

function concurrency.consume(view, now, cost, spec)
  return sliding_log.consume(view, now, cost, spec)
end

function concurrency.refund(view, now, cost, spec, mark)
  return sliding_log.refund(view, now, cost, spec, mark)
end

function concurrency.ttl(raw, now, spec)
  return sliding_log.ttl(raw, now, spec)
end

function concurrency.limited(rule, n, w)  -- a count of leases only: stored without a window
  if w ~= 0 then return nil end
  return sliding_log.limited(rule, n, rule.window)
end
