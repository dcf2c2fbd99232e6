-- token-bucket: the Lua twin of freqguard/script/strategies/token_bucket.py; its code and
-- formats are in lua/contract.lua (from the module).
-- state: (tokens, last, back, born), packed as TOKEN_BUCKET_STATE (tokens, last, back,
-- born), or TOKEN_BUCKET_SHORT (tokens, last, last - born; back 0); back and born as gcra's

local function token_pack(tokens, last, back, born)
  local age = last - born
  if back == 0 and born >= 0 and age >= 0 and age < SHORT_SPAN then
    return pack(TOKEN_BUCKET_SHORT, tokens, last, age)
  end
  return pack(TOKEN_BUCKET_STATE, tokens, last, back, born)
end

local function token_read(raw)
  if #raw == token_bucket.short_bytes then
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

function token_bucket.newest(raw)  -- its generation's birth (a reset ends after it)
  local _, _, _, born = token_read(raw)
  return born
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
  moved = min(moved, cost * rule.interval)  -- never more than taken (token_bucket.py)
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
