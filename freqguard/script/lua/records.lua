-- The record: where a call's states and per-key limits live (freqguard/script/keys.py says
-- where, for both twins), read and written here; Lua only: the Python twin's store
-- (twin.py StateStore) keeps them as numbers.
--
-- A record is its own hash (KEYS[1]), or, when the call goes to the binned functions (the
-- library's last two; ARGV[1] the record's 8-byte id, the rest as above), one field of the
-- shared hash KEYS[1], which holds the same fields as one string in a compact form (see
-- Bins). The id is no key: a key that never exists would make a node refuse the call
-- (TRYAGAIN) while its slot migrates. Everything below reads and writes a
-- record through these functions, on the hash itself or on the bin's record, decoded once
-- a call (rec.map) and written back once (bin_flush).

-- The fields `names` of a binned record, false where absent (an HMGET's reply).
local function bin_get(rec, names)
  local got = {}
  for i = 1, #names do
    local at = rec.index[names[i]]
    got[i] = at and entry_field(rec.blob, rec.entries[at]) or false
    if at then rec.map[names[i]] = got[i] end
  end
  return got
end

-- A state whose 2-byte tag another state of its policy shares comes with the name freqguard
-- 0.3.0 and before gave it (WIDE_TAG_BYTES of its key id, then its digest) before its own
-- (a 3-byte tag), a length of 1 mod 8 (keys.py KeyLayout.sent_tag): its own goes back in
-- argv, and the old one in the list returned (by the state's index; nil when none came).
local function split_names(argv, n)
  local olds
  for i = 1, n do
    local name = argv[ARGV_FIELDS - 1 + i]
    if #name % 8 == 1 then
      olds = olds or {}
      olds[i] = sub(name, 1, WIDE_TAG_BYTES) .. sub(name, WIDE_TAG_BYTES + OLD_TAG_BYTES + 2)
      argv[ARGV_FIELDS - 1 + i] = sub(name, WIDE_TAG_BYTES + 1)
    end
  end
  return olds
end

-- A state may be stored under an old name (see contract.py RECORD_LAYOUT): in a record of
-- layout 2, 3 or MOVING_LAYOUT, its tag's first OLD_TAG_BYTES, and in any record, the wide
-- name the call sent (`wide`, see split_names), which is the only one read for such a state
-- (its 2-byte name would be another's too). Where the call's name for it is absent, the
-- state is read there, and noted in rec.moved (the old name, the state's index) for
-- write_record to move. A reset (`resets`) forgets a state under both names: a wide one
-- found beside its own (a 0.3.0 client wrote it during a roll) is noted in rec.moved too,
-- its index negated, for write_record to delete (review: it counted again after a reset).
local function read_old_names(rec, got, argv, n, wide, resets)
  local meta = got[1]
  local layout = meta and (byte(meta, 1) or 0) - LAYOUT_STAMPS
  -- a new record has no old names; one check_layout drops or refuses is not read
  if not layout or layout < OLDEST_LAYOUT or layout > RECORD_LAYOUT then return end
  local moving = layout <= MOVING_LAYOUT
  if not moving and not wide then return end
  local olds, at = {}, {}
  for i = 1, n do
    if got[i + 1] then
      if resets and wide and wide[i] then
        olds[#olds + 1] = wide[i]
        at[#olds] = -i
      end
    else
      local old = wide and wide[i]
      local name = argv[ARGV_FIELDS - 1 + i]
      if not old and moving and #name % 8 == OLD_TAG_BYTES + 1 then  -- a 3-byte tag's
        old = sub(name, 1, OLD_TAG_BYTES) .. sub(name, OLD_TAG_BYTES + 2)
      end
      if old then
        olds[#olds + 1] = old
        at[#olds] = i
      end
    end
  end
  if #olds == 0 then return end
  local found = rec.rid and bin_get(rec, olds) or call('HMGET', rec.key, tunpack(olds))
  local moved = {}
  for j = 1, #olds do
    if found[j] then
      if at[j] > 0 then got[at[j] + 1] = found[j] end
      moved[#moved + 1], moved[#moved + 2] = olds[j], at[j]
    end
  end
  rec.moved = moved
end

-- A record, and its fields named by the call (got[1] the meta field, got[i + 1] state i's;
-- false where absent). A binned one keeps in rec.map the fields it decoded or changed
-- (rec.touched: set or deleted), its other entries as they are.
local function open_record(keys, argv, n, record, writes, resets)
  local key = keys[1]
  local rec, got
  local wide = split_names(argv, n)
  if not record then
    rec = {key = key}
    got = call('HMGET', key, '', tunpack(argv, ARGV_FIELDS, ARGV_FIELDS - 1 + n))
  else
    local rid, bins = sub(record, 1, 8), sunpack(BIN_RECORD, record, 9)
    local pair = call('HMGET', key, '', rid)
    check_bins(key, pair[1], bins, writes)
    rec = {key = key, rid = rid, bins = bins, bin = pair[1], blob = pair[2], touched = {}}
    local map, entries, index = blob_read(key, pair[2])
    rec.map, rec.entries, rec.index, rec.unread = map or {}, entries or {}, index or {}, not map
    got = {rec.map[''] or false, tunpack(bin_get(rec, {tunpack(argv, ARGV_FIELDS,
      ARGV_FIELDS - 1 + n)}))}
  end
  rec.argv = argv
  read_old_names(rec, got, argv, n, wide, resets)
  return rec, got
end

local function rec_all(rec)  -- HGETALL
  if not rec.rid then return call('HGETALL', rec.key) end
  local all, map, touched = {}, rec.map, rec.touched
  if map[''] then all = {'', map['']} end
  local entries = rec.entries
  for i = 2, #entries - 2, 2 do
    local name = entries[i - 1]
    if not touched[name] then
      all[#all + 1] = name
      all[#all + 1] = map[name] or entry_field(rec.blob, entries[i])
    end
  end
  for name, value in pairs(map) do
    if name ~= '' and touched[name] then
      all[#all + 1] = name
      all[#all + 1] = value
    end
  end
  return all
end

local function rec_drop_fields(rec, names)  -- HDEL
  if not rec.rid then
    call('HDEL', rec.key, tunpack(names))
    return
  end
  for i = 1, #names do rec.map[names[i]], rec.touched[names[i]] = nil, true end
  rec.dirty = true
end

local function rec_count(rec)  -- HLEN
  if not rec.rid then return call('HLEN', rec.key) end
  return #rec_all(rec) / 2
end

local function rec_delete(rec)  -- DEL
  if not rec.rid then
    call('DEL', rec.key)
    return
  end
  rec.map, rec.entries, rec.index, rec.touched, rec.dirty = {}, {}, {}, {}, true
end

local function rec_set(rec, sets)  -- HSET
  if not rec.rid then
    call('HSET', rec.key, tunpack(sets))
    return
  end
  for i = 1, #sets, 2 do rec.map[sets[i]], rec.touched[sets[i]] = sets[i + 1], true end
  rec.dirty = true
end

-- The record's TTL (ms), or (nil) for ever: a bin keeps the longest its records need
-- (bin_flush).
local function rec_expire(rec, ttl_ms)
  if not rec.rid then
    if ttl_ms then call('PEXPIRE', rec.key, ttl_ms) else call('PERSIST', rec.key) end
    return
  end
  rec.ttl_ms, rec.persist = ttl_ms, not ttl_ms
end

-- Fields whose expiry has passed no longer matter; they go once the record holds more than
-- prune_at fields, which then doubles what is left: amortized O(1) per write. Only on the
-- server's time: a pinned record goes whole, in real time (its TTL), as in the memory twin.
-- What is left, and whether a state in it is still under its old name (MOVING_LAYOUT).
local function prune(rec, now)
  local all, stale, old = rec_all(rec), {}, false
  for i = 1, #all, 2 do
    local name = all[i]
    if name ~= '' then
      if sunpack(FIELD_HEAD, all[i + 1]) <= now - STALE_GRACE_US then
        stale[#stale + 1] = name
      elseif #name % 8 == OLD_TAG_BYTES then
        old = true  -- a live state under its old name (see move_old_names)
      end
    end
  end
  if #stale > 0 then rec_drop_fields(rec, stale) end
  local live = -#stale
  for i = 1, #all, 2 do
    if all[i] ~= '' then live = live + 1 end
  end
  return live, old
end

-- The record's expiry after a write of that latest expiry, and its TTL (ms) when it must be
-- set (nil: the current one still covers every field).
local function record_ttl(record_expiry, latest, now, clock, pinned)
  if pinned then
    record_expiry = max(record_expiry, latest)
    return record_expiry, ceil((record_expiry + STALE_GRACE_US - clock) / 1000) + PINNED_GRACE_MS
  end
  if latest > record_expiry then
    record_expiry = latest + floor((latest - now) / 32)  -- slack: most writes keep the TTL
    return record_expiry, ceil((record_expiry + STALE_GRACE_US - clock) / 1000)
  end
  return record_expiry, nil
end

-- The latest expiry of a record's state fields (a change of its limits reads them all).
local function fields_expiry(rec)
  local all, latest = rec_all(rec), 0
  for i = 1, #all, 2 do
    if all[i] ~= '' then latest = max(latest, sunpack(FIELD_HEAD, all[i + 1])) end
  end
  return latest
end

-- The record's expiry and TTL (ms; nil: keep it) when its limits hold it until `held`
-- (NEVER: no TTL; PERSIST after a change). A change of limits sets the TTL afresh, from
-- what the states need and what the limits do.
local function limits_ttl(rec, record_expiry, latest, held, now, clock, pinned, changed)
  if changed then record_expiry = fields_expiry(rec) end
  if held >= NEVER then  -- the states' expiry is kept (with slack) for when no limit holds
    if changed then rec_expire(rec, nil) end
    return (record_ttl(record_expiry, latest, now, clock, false)), nil
  end
  if changed then
    local expiry, ttl_ms = record_ttl(0, max(record_expiry, latest, held), now, clock, pinned)
    -- a pinned time's TTL only grows: each state was kept the pinned grace in real time from
    -- its write (as in the memory twin), however far the pinned time has moved since; a
    -- record a limit for ever held (no TTL: -1) keeps the grace from now
    if pinned and not rec.rid then
      local kept = call('PTTL', rec.key)
      ttl_ms = max(ttl_ms, kept == -1 and PINNED_GRACE_MS or kept)
    end
    return expiry, ttl_ms
  end
  return record_ttl(record_expiry, max(latest, held), now, clock, pinned)
end

-- A record's states read under their old names (rec.moved, see read_old_names) are written
-- under the call's names (as they were, when the call left them as they were) and their old
-- fields deleted; old names of states the call did not name stay, but those whose expiry
-- has passed go (on the server's time, as prune). The layout to stamp: MOVING_LAYOUT while
-- a field may still be named the old way, else RECORD_LAYOUT; how many fields went; and
-- the latest expiry of the states moved (the record's TTL must cover them: a LIMIT call's
-- reads the fields, where they are not yet). A record whose `stamp` is this layout's has
-- only wide names to move (see split_names), and stays this layout's. A write that moves
-- nothing reads nothing more:
-- the record stays MOVING_LAYOUT until a move or a prune finds no old name left.
local function move_old_names(rec, got, sets, drops, stamp, clock, pinned)
  local moving = stamp >= LAYOUT_STAMPS + OLDEST_LAYOUT
    and stamp <= LAYOUT_STAMPS + MOVING_LAYOUT
  local moved = rec.moved or {}
  if #moved == 0 then return moving and MOVING_LAYOUT or RECORD_LAYOUT, 0, 0 end
  local named, olds, latest, twice = {}, {}, 0, 0
  for i = 1, #sets, 2 do named[sets[i]] = true end
  for i = 1, #drops do named[drops[i]] = true end
  for j = 1, #moved, 2 do
    local i = moved[j + 1]
    if i < 0 then  -- a reset's: a state's wide name beside its own, one field fewer
      twice = twice + 1
    else
      local name = rec.argv[ARGV_FIELDS - 1 + i]
      latest = max(latest, (sunpack(FIELD_HEAD, got[i + 1])))
      if not named[name] then
        sets[#sets + 1] = name
        sets[#sets + 1] = got[i + 1]
      end
    end
    olds[#olds + 1] = moved[j]
  end
  rec_drop_fields(rec, olds)
  -- a record of this layout moved wide names only (the calls that name them look for the
  -- others): it has no 2-byte ones to look for
  if not moving then return RECORD_LAYOUT, twice, latest end
  local all, left, stale = rec_all(rec), false, {}
  for i = 1, #all, 2 do
    local name = all[i]
    if name ~= '' and #name % 8 == OLD_TAG_BYTES then
      if not pinned and sunpack(FIELD_HEAD, all[i + 1]) <= clock - STALE_GRACE_US then
        stale[#stale + 1] = name
      else
        left = true
      end
    end
  end
  if #stale > 0 then rec_drop_fields(rec, stale) end
  return left and MOVING_LAYOUT or RECORD_LAYOUT, #stale + twice, latest
end

-- Write: the changed fields, the meta field (with the limits, `tail`), the record's TTL; an
-- emptied record without limits goes.
local function write_record(rec, got, sets, drops, latest, added, now, clock, pinned, lim)
  if #sets == 0 and #drops == 0 and not lim.changed then return end
  local meta, stamp, record_expiry, fields, prune_at = got[1], 0, 0, 0, PRUNE_FLOOR
  if meta then stamp, record_expiry, fields, prune_at = sunpack(RECORD_META, meta) end
  if #drops > 0 then rec_drop_fields(rec, drops) end
  local layout, gone, moved_latest = move_old_names(rec, got, sets, drops, stamp, clock, pinned)
  fields, latest = fields - gone, max(latest, moved_latest)
  fields = fields + added - #drops
  if #sets == 0 and fields <= 0 then fields = rec_count(rec) - 1 end
  if #sets == 0 and fields <= 0 and lim.tail == '' then
    rec_delete(rec)
    return
  end
  if fields > prune_at and not pinned then  -- pinned records go in real time (their TTL)
    if #sets > 0 then rec_set(rec, sets) end
    local old_left
    sets, fields, old_left = {}, prune(rec, clock)
    prune_at = max(PRUNE_FLOOR, 2 * fields)
    if not old_left then layout = RECORD_LAYOUT end
  end
  local ttl_ms, given = nil, record_expiry
  if lim.tail == '' and not lim.changed then
    record_expiry, ttl_ms = record_ttl(record_expiry, latest, now, clock, pinned)
  else
    local held = limits_until(lim.entries)
    record_expiry, ttl_ms = limits_ttl(rec, record_expiry, latest, held, now, clock, pinned,
      lim.changed)
  end
  if ttl_ms or record_expiry ~= given or added > 0 or #drops > 0 or gone > 0 or not meta
    or lim.changed or stamp ~= LAYOUT_STAMPS + layout then  -- an older layout's record: stamped anew
    sets[#sets + 1] = ''
    sets[#sets + 1] = pack(RECORD_META, LAYOUT_STAMPS + layout, record_expiry,
      max(fields, 0), prune_at) .. lim.tail
  end
  if #sets > 0 then rec_set(rec, sets) end
  if ttl_ms then rec_expire(rec, max(1, ttl_ms)) end
end



-- The record's layout (see Layout in the header): 0 when it is absent or in this layout;
-- REPLY_DROPPED when it had no stamp (or an unreadable one), after deleting it and emptying
-- `got` (its HMGET), so the call decides as if it were absent. A record of a newer layout
-- fails the call, which changes nothing.
local function check_layout(rec, got, n)
  if rec.unread then  -- a binned record's string it could not read (got is all false)
    rec_delete(rec)
    return REPLY_DROPPED
  end
  local meta = got[1]
  if meta then
    local stamp = byte(meta, 1)
    if stamp >= LAYOUT_STAMPS + OLDEST_LAYOUT and stamp <= LAYOUT_STAMPS + RECORD_LAYOUT
      and (#meta - RECORD_META_BYTES) % LIMIT_ENTRY_BYTES == 0 then
      return 0
    elseif stamp > LAYOUT_STAMPS + RECORD_LAYOUT then
      fail(format('ERR freqguard record %s is in layout %d, newer than the %d this '
        .. 'release reads: upgrade freqguard on this client', rec.key, stamp - LAYOUT_STAMPS,
        RECORD_LAYOUT))
    end
  else
    local found = false
    for i = 2, n + 1 do found = found or got[i] ~= false end
    if not found then return 0 end
  end
  rec_delete(rec)
  rec.moved = nil  -- what read_old_names found goes with it (review: a write unpacked none)
  for i = 1, n + 1 do got[i] = false end
  return REPLY_DROPPED
end
