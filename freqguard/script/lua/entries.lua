-- The policy function's entry points, which a tail (lua/register.lua) hands to Redis: the
-- function itself (the libraries bound on its first call), its _nogrow variant, and the
-- binned form of either. Each takes (keys, argv) as the call sends them.

local bound = false

local function policy(keys, argv, rid)
  if not bound then
    bind()
    if bind_entries then bind_entries() end  -- none in an unbinned EVAL script
    bound = true
  end
  return run(keys, argv, rid)
end

local function nogrow(keys, argv, rid)
  local mode = tonumber(argv[ARGV_MODE])
  if (mode == HIT or mode == LIMIT or mode == CLAIM) and tonumber(argv[ARGV_COST]) > 0 then
    return redis.error_reply('ERR a call that grows cannot run as a _nogrow function')
  end
  return policy(keys, argv, rid)
end

-- A binned call: its ARGV[1] is the record's id, the rest the ARGV above.
local function binned(callback)
  return function(keys, argv)
    local rest = {}
    for i = ARGV_RECORD + 1, #argv do rest[i - ARGV_RECORD] = argv[i] end
    return callback(keys, rest, argv[ARGV_RECORD])
  end
end
