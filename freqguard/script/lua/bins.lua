-- Bins: with RedisBackend(bins=N) the records of many partition values share one hash
-- (a bin, KeyLayout.bin in freqguard/script/keys.py), each one string in its field; a
-- record's calls go to the binned functions (lua/entries.lua), and lua/records.lua reads
-- and writes such a record through the codec below, and keeps the bin's TTL with
-- bin_flush. Lua only: the memory twin keeps no bytes.
--
-- A binned record's string is BLOB_HEAD (the stamp LAYOUT_STAMPS + BIN_LAYOUT,
-- the record's expiry), then the meta field's numbers as varints (fields, prune_at, number
-- of limits), its limits as stored, then one entry per state field: one byte (the name's
-- length and the entry's kind, see entry_flag), the name, the field's expiry
-- and its span (expiry - latest) in 4 or 5 bytes, or its latest in full (BIN_ENTRY_HEADS),
-- the state's length in one byte or in four, and the state. An entry depends on nothing
-- else in the string: a call decodes only the fields it names and copies the rest as is.
local BIN_FLOOR = 16                     -- the records it holds before stale ones are swept
local BIN_SLACK = 8                      -- a bin's expiry, when extended, gains 1/8 more
-- an entry's kind: 2 x its head (BIN_ENTRY_HEADS) + its state length's (0: one byte,
-- 1: four)
local ENTRY_FORMATS = {}                 -- by kind: '>' .. head .. length .. 'c0' (see bind)

-- A state's field named the way of layouts 2 and 3 (and bin layout 4): its 2-byte tag,
-- then its 8-byte digest if any (a 3-byte tag makes 3 or 11 bytes, a 6-byte one 6 or 14).
local function old_name(name)
  return #name % 8 == OLD_TAG_BYTES
end

-- An entry's first byte: a name of 2, 6, 10 or 14 bytes (the tags of layout 4, and the
-- 6-byte ones), as 0-3, + 4 x its kind (0-5); a name of 3 or 11 bytes (a 3-byte tag, see
-- MOVING_LAYOUT), 24 + 0 or 1 + 2 x its kind. The name's length and the kind.
local function entry_flag(flag)
  if flag < 24 then
    local code = flag % 4
    return 2 + 4 * code, (flag - code) / 4
  end
  local code = (flag - 24) % 2
  return 3 + 8 * code, (flag - 24 - code) / 2
end

local function bind_entries()  -- on the first call, as bind()
  for head = 0, #BIN_ENTRY_HEADS do
    ENTRY_FORMATS[2 * head] = '>' .. BIN_ENTRY_HEADS[head] .. 'I1c0'
    ENTRY_FORMATS[2 * head + 1] = '>' .. BIN_ENTRY_HEADS[head] .. 'I4c0'
  end
end

local function varint(n)  -- n >= 0, 7 bits a byte, low first, the high bit on all but the last
  if n < 128 then return char(n) end  -- the usual case, without a table
  local out = {}
  while n >= 128 do
    local low = n % 128
    out[#out + 1] = char(low + 128)
    n = (n - low) / 128
  end
  out[#out + 1] = char(n)
  return concat(out)
end

local function varint_at(s, at)  -- the varint at `at`, and the position after it
  local n, scale = 0, 1
  while true do
    local b = byte(s, at)
    at = at + 1
    if b < 128 then return n + b * scale, at end
    n, scale = n + (b - 128) * scale, scale * 128
  end
end

-- The entry at `at`: its name, and where the next one starts (nothing decoded).
local function entry_at(blob, at)
  local length, kind = entry_flag(byte(blob, at))
  local head = at + 1 + length
  local state = head + BIN_ENTRY_HEAD_BYTES[(kind - kind % 2) / 2]
  local size
  if kind % 2 == 0 then
    size, state = byte(blob, state), state + 1
  else
    local b1, b2, b3, b4 = byte(blob, state, state + 3)
    size, state = ((b1 * 256 + b2) * 256 + b3) * 256 + b4, state + 4
  end
  return sub(blob, at + 1, head - 1), state + size
end

-- The field the entry at `at` holds, as a hash holds it.
local function entry_field(blob, at)
  local length, kind = entry_flag(byte(blob, at))
  local expiry, b, state = sunpack(ENTRY_FORMATS[kind], blob, at + 1 + length)
  if kind >= 2 then b = expiry - b end  -- b was the span
  return pack(FIELD_HEAD, expiry, b) .. state
end

-- One state field as a binned record holds it (see Bins).
local function blob_entry(name, value)
  local expiry, latest = sunpack(FIELD_HEAD, value)
  local state = sub(value, FIELD_HEAD_BYTES + 1)
  local kind = #state < 256 and 0 or 1
  local span = expiry - latest
  local entry
  if span < 0 or span >= SHORT_SPAN then
    entry = pack(ENTRY_FORMATS[kind], expiry, latest, #state, state)
  else
    kind = kind + (span < 2 ^ 32 and 2 or 4)
    entry = pack(ENTRY_FORMATS[kind], expiry, span, #state, state)
  end
  local n, flag = #name
  if n == 3 or n == 11 then
    flag = 24 + (n - 3) / 8 + 2 * kind
  elseif n % 4 == 2 and n <= 14 then
    flag = (n - 2) / 4 + 4 * kind
  else
    fail('ERR freqguard: a field name of ' .. n .. ' bytes cannot be binned')
  end
  return char(flag) .. name .. entry
end

-- A bin's setting against the call's (its client's bins): a bin that holds another
-- fails the call, before it writes (BINS_OTHER); one that holds none fails a call that
-- may write (UNCLAIMED), denied or not: a batch's later calls on the bin then fail too, and
-- go again after the earlier ones, in order (a denied hit that ran before an earlier
-- call's write would answer from a state without it).
local function check_bins(key, meta, bins, writes)
  if not meta then
    if writes then fail('ERR ' .. UNCLAIMED) end
    return
  end
  local ok, _, _, held = pcall(sunpack, BIN_META, meta)
  if ok and held ~= bins then
    fail(format('ERR %s%d in %s, and this client has bins=%d', BINS_OTHER, held, key,
      bins))
  end
end

-- A bin claimed for the setting a binned call's record names (a CLAIM call, which a client
-- makes when a call failed with UNCLAIMED, after it checked the store's record of the
-- setting): the setting the bin holds, now this one if it held none. A meta field written
-- here has an unknown deadline (the next write sweeps the bin and sets it); a new bin
-- expires in a day if no write comes.
local function claim_bin(key, record)
  local bins = sunpack(BIN_RECORD, record, 9)
  local meta = call('HGET', key, '')
  if meta then
    local ok, _, _, held = pcall(sunpack, BIN_META, meta)
    if ok then return held end
  end
  local existed = call('EXISTS', key) == 1
  call('HSET', key, '', pack(BIN_META, 2 * NEVER, BIN_FLOOR, bins))
  if not existed then call('PEXPIRE', key, 86400000) end
  return bins
end

-- A binned record's meta field and entries (see blob_read); fails on a string cut short.
local function blob_parse(blob)
  local _, expiry, at = sunpack(BLOB_HEAD, blob)
  local fields, prune_at, limits
  fields, at = varint_at(blob, at)
  prune_at, at = varint_at(blob, at)
  limits, at = varint_at(blob, at)
  local tail_end, size = at + limits * LIMIT_ENTRY_BYTES, #blob
  if tail_end > size + 1 then error('cut short') end
  local entries, index, i, layout = {}, {}, 0, RECORD_LAYOUT
  local limits_at = at
  at = tail_end
  while at <= size do  -- entries[2i - 1] the name, entries[2i] where it starts
    local name, after = entry_at(blob, at)
    if after > size + 1 then error('cut short') end
    i = i + 1
    entries[2 * i - 1], entries[2 * i], index[name] = name, at, 2 * i
    if old_name(name) then layout = MOVING_LAYOUT end
    at = after
  end
  entries[2 * i + 1], entries[2 * i + 2] = false, size + 1  -- where a next one would start
  local map = {[''] = pack(RECORD_META, LAYOUT_STAMPS + layout, expiry, fields, prune_at)
    .. sub(blob, limits_at, tail_end - 1)}
  return map, entries, index
end

-- A binned record: its meta field "" (rebuilt as RECORD_META stamped with this release's
-- RECORD_LAYOUT, or MOVING_LAYOUT while a state is under its old name, so the steps read it
-- as they read a hash's), its entries in order (each
-- name, then where it starts), and where each name's start is in them; false for a string
-- of an older or unknown form, or cut short, which the call drops. A newer one fails the
-- call.
local function blob_read(key, blob)
  if not blob then return {}, {}, {} end
  local stamp = byte(blob, 1)
  if stamp ~= LAYOUT_STAMPS + BIN_LAYOUT and stamp ~= LAYOUT_STAMPS + OLDEST_BIN_LAYOUT then
    if stamp and stamp > LAYOUT_STAMPS + BIN_LAYOUT then
      fail(format('ERR freqguard record in bin %s is in layout %d, newer than the '
        .. '%d this release reads: upgrade freqguard on this client', key, stamp - LAYOUT_STAMPS,
        BIN_LAYOUT))
    end
    return false
  end
  local ok, map, entries, index = pcall(blob_parse, blob)
  if not ok then return false end
  return map, entries, index
end

-- A binned record's string: its meta field, the entries no call changed as they were
-- (each run of them copied at once), then the fields it set.
local function blob_write(rec)
  local meta = rec.map['']
  local _, expiry, fields, prune_at = sunpack(RECORD_META, meta)
  local tail = sub(meta, RECORD_META_BYTES + 1)
  local parts = {pack(BLOB_HEAD, LAYOUT_STAMPS + BIN_LAYOUT, expiry), varint(fields),
    varint(prune_at), varint(#tail / LIMIT_ENTRY_BYTES), tail}
  local entries, touched, from = rec.entries, rec.touched, false
  for i = 2, #entries - 2, 2 do
    if touched[entries[i - 1]] then
      if from then parts[#parts + 1] = sub(rec.blob, from, entries[i] - 1) end
      from = false
    else
      from = from or entries[i]
    end
  end
  if from then parts[#parts + 1] = sub(rec.blob, from, entries[#entries] - 1) end
  for name, value in pairs(rec.map) do
    if name ~= '' and touched[name] then parts[#parts + 1] = blob_entry(name, value) end
  end
  return concat(parts)
end

-- A binned record's expiry, or NEVER if a limit holds it for ever; fails on a string cut
-- short.
local function blob_expiry(blob)
  local _, expiry, at = sunpack(BLOB_HEAD, blob)
  local limits
  _, at = varint_at(blob, at)
  _, at = varint_at(blob, at)
  limits, at = varint_at(blob, at)
  for i = 0, limits - 1 do
    local _, until_ = sunpack(LIMIT_ENTRY, blob, at + i * LIMIT_ENTRY_BYTES)
    if until_ == 0 then return NEVER end
  end
  return expiry
end

-- How long a binned record is needed, on its calls' time: blob_expiry; false for a string
-- of an older or unknown form, or cut short (it goes); true for a newer release's (it stays,
-- unread, and holds nothing).
local function blob_until(blob)
  local stamp = byte(blob, 1)
  if stamp ~= LAYOUT_STAMPS + BIN_LAYOUT and stamp ~= LAYOUT_STAMPS + OLDEST_BIN_LAYOUT then
    return stamp ~= nil and stamp > LAYOUT_STAMPS + BIN_LAYOUT
  end
  local ok, until_ = pcall(blob_expiry, blob)
  return ok and until_
end

-- A bin's deadline and TTL set afresh from its records. Where that cannot know every
-- record's need (a pinned time, a newer release's record, a lost meta field: `damaged`),
-- the TTL only grows. On the server's time, the
-- records whose time has passed (their expiry, or a limit's) go first, as stale fields do
-- in a record; a pinned time deletes nothing (it may come back to them). `real`: the
-- server's time, on which the deadline is kept.
local function sweep(key, clock, real, pinned, damaged, bins)
  local all, stale, live, latest, newer = call('HGETALL', key), {}, 0, 0, false
  for i = 1, #all, 2 do
    if all[i] ~= '' then
      local until_ = blob_until(all[i + 1])
      if until_ == true then
        live, newer = live + 1, true
      elseif not pinned and (not until_ or until_ <= clock - STALE_GRACE_US) then
        stale[#stale + 1] = all[i]
      else
        live, latest = live + 1, max(latest, until_ or 0)
      end
    end
  end
  if #stale > 0 then call('HDEL', key, tunpack(stale)) end
  if live == 0 then
    call('DEL', key)
    return
  end
  local deadline = NEVER
  if latest < NEVER then
    local ttl = max(1, ceil((latest + STALE_GRACE_US - clock) / 1000))
    if pinned then ttl = ttl + PINNED_GRACE_MS end
    if pinned or newer or damaged then  -- what it knows may be short of what is needed:
      local now_ttl = call('PTTL', key)  -- it only extends (a TTL-less key gets one)
      if now_ttl > ttl then ttl = now_ttl end
    end
    deadline = real + 1000 * ttl
    call('PEXPIRE', key, ttl)
  else
    call('PERSIST', key)
  end
  call('HSET', key, '', pack(BIN_META, deadline, max(BIN_FLOOR, 2 * live), bins))
end

-- A binned record written back (or deleted); the bin's TTL kept the longest its
-- records need, as a deadline on the server's time (a pinned call asks TIME for it), so
-- that no write, pinned or not, in or out of order, shortens it; the bin swept when it
-- has grown past its prune_at, or set afresh (`recompute`) when a change of limits or a
-- dropped record may have ended what held it for ever.
local function bin_flush(rec, clock, pinned, recompute)  -- a binned record's (rec.rid)
  if not rec.dirty then return end
  if not rec.bin then fail('ERR ' .. UNCLAIMED) end  -- nothing written yet
  local key, rid, bins = rec.key, rec.rid, rec.bins
  local known, deadline, prune_at = false, 0, BIN_FLOOR
  if rec.bin then known, deadline, prune_at = pcall(sunpack, BIN_META, rec.bin) end
  if not known or deadline > NEVER then deadline, prune_at, known = 0, BIN_FLOOR, false end
  local real = clock
  if pinned then
    local t = call('TIME')
    real = t[1] * 1000000 + t[2]
  end
  local grows = false
  if not rec.map[''] then  -- deleted (a record's meta field goes only with the record)
    if rec.blob then
      call('HDEL', key, rid)
      local left = call('HLEN', key)
      if left == 0 or (left == 1 and known) then  -- nothing but its meta field
        call('DEL', key)
        return
      end
    end
  else
    grows = call('HSET', key, rid, blob_write(rec)) == 1
  end
  -- a meta field missing (beside other records) or unreadable: its deadline is unknown
  local damaged = not known and (rec.bin or call('HLEN', key) > 1)
  if recompute or damaged or (grows and not pinned and call('HLEN', key) - 1 > prune_at) then
    sweep(key, clock, real, pinned, damaged, bins)
  elseif rec.persist and deadline < NEVER then
    call('PERSIST', key)
    call('HSET', key, '', pack(BIN_META, NEVER, prune_at, bins))
  elseif rec.ttl_ms and real + 1000 * rec.ttl_ms > deadline then  -- with slack of its own:
    local slack = ceil(rec.ttl_ms / BIN_SLACK)  -- most records' writes then keep it
    call('PEXPIRE', key, rec.ttl_ms + slack)
    call('HSET', key, '', pack(BIN_META, real + 1000 * (rec.ttl_ms + slack), prune_at, bins))
  elseif not known then
    call('HSET', key, '', pack(BIN_META, deadline, prune_at, bins))
  end
end
