-- freqguard policy function: the Lua twin of freqguard/script/twin.py (run) and of the strategy
-- twins in freqguard/script/strategies/*.py. Each strategy has the functions of its Python
-- module, under the same names and in the same order, in the Lua file beside it
-- (strategies/gcra.lua beside gcra.py), except report: the server only decides and returns
-- the states it leaves behind, and the client (script/calls.py, Reply) derives remaining
-- and reset from them, so no server time goes to answers most callers never read.
--
-- A Redis Function (FUNCTION LOAD, FCALL), not an EVAL script: the strategies' functions and
-- the parsed specs are built once per server, not on every call.
--
-- Files: the Lua is written in several files, each beside the Python it mirrors, joined
-- into one chunk in the order of freqguard/script/library.py MANIFEST (each file sees the
-- locals of those before it): this one (the libraries); the contract's constants, generated
-- from the Python (lua/contract.lua, by scripts/lua_contract.py); what the strategies share
-- (strategies/base.lua), then each strategy; the specs; per-key limits; bins; the
-- record; the policy function's steps, then the function itself (run, lua/twin.lua), which
-- calls them in that order; its entry points (lua/entries.lua); last a tail that makes them
-- something Redis runs (lua/register.lua: the Redis Functions). The Python twin
-- (freqguard/script/twin.py) defines the steps both twins share under the same names, in the
-- same order (freqguard/script/contract.py RUN_STEPS).
--
-- KEYS   [1] the record: a hash holding every state of one partition (recipient) and policy
-- ARGV   read through the named positions of lua/contract.lua (contract.py ARGV, ARGV_STATES):
--        [ARGV_NOW] microseconds, or "" to use the server's TIME
--        [ARGV_COST] integer >= 0 (0: only check)
--        [ARGV_MODE] 0 HIT, 1 CHECK, 2 REFUND, 3 RESET, 4 LIMIT
--        [ARGV_SPECS] space-separated integers: the number of states, then for each state
--            its strategy's code (see TWINS), shadow (0/1), number of rules, and the window
--            (µs) and count it keeps (at least its rules': more under a tier of a shorter
--            window, as under a per-key limit), then for each
--            rule: capacity, window (µs), interval (µs per token, buckets; else 0), shadow
--            (0/1), tag (names the rule for per-key limits), reserve (a priority's cap),
--            burst (a bucket rule's own, 0: none); after a calendar state's
--            rules, the periods around the client's clock (BOUNDS); see parse_specs
--        [ARGV_FIELDS ...] one per state, its field in the record (a 3-byte field tag,
--            plus the 8-byte digest of its other dimension values when it has any; layouts
--            2 and 3 named it by the tag's first 2 bytes: see read_old_names), after the
--            6-byte name 0.3.0 gave it when another state shared those (split_names)
--        then, REFUND only and optional: one per state, the mark the hit to give back left
--            there (calls.Reply.marks: its time; "tat:back:born:interval" for buckets), ""
--            where it consumed nothing; without them a refund gives back the newest units
--        or, LIMIT only: the change to the record's per-key limits (change_limits)
-- Reply  one string: REPLY_HEAD, flags (1 allowed, plus REPLY_LIMITS when limits follow,
--        REPLY_DROPPED, see Layout) and the µs it was judged at (see Time); REPLY_WAIT per
--        rule in spec order, its wait (µs until the rule would admit the hit; 0: it does);
--        then per state REPLY_STATE_LENGTH and the packed state the call leaves behind
--        (length 0: none); then the record's per-key limits, as stored (LIMIT_ENTRY each), if any.
-- Record each state's field holds FIELD_HEAD, its expiry and the latest time it was written
--        at (µs), then the packed state (absent once expired). The field "" holds
--        RECORD_META: the layout's stamp, the expiry the record was given, its number of state
--        fields, and the count at which stale fields are next pruned (prune_at), then the
--        record's per-key limits (LIMIT_ENTRY each). The record's TTL covers every field
--        and limit (with some slack, so most writes leave it alone; plus a grace period
--        when time is pinned); a limit set for ever keeps the record for ever.
-- Time   the server's TIME unless pinned, or the latest time a state of the call was written
--        at if that is later: time per state never goes back (a lagging clock after a
--        failover, calls out of order). All arithmetic on integers below 2^53
--        (freqguard/bounds.py).
-- Layout each record states its layout (RECORD_LAYOUT) in its meta field's first byte,
--        LAYOUT_STAMPS + the layout. A record without a stamp (freqguard 0.1, whose layouts
--        cannot be told apart) is dropped, its call decided as if it were absent; one of a
--        newer layout is refused, never misread (see check_layout). Layout 3 stores states
--        short where they fit (SHORT_SPAN); layout 2 stored every state in full, which
--        later layouts still read as it is. Layout 6 names states by 3-byte tags, where 2
--        and 3 used 2 bytes; a record of 2, 3 or MOVING_LAYOUT is read under both names
--        and its states moved by the calls that write them (read_old_names).

-- The libraries, bound by bind() on the first call: the load context offers none of them
-- (not even tonumber), so nothing below may read them before a call.
local floor, max, min, ceil
local pack, sunpack, sub, rep, match, gmatch, format, byte, char
local concat, tunpack, call

local function bind()
  floor, max, min, ceil = math.floor, math.max, math.min, math.ceil
  pack, sunpack, sub, rep = struct.pack, struct.unpack, string.sub, string.rep
  match, gmatch, format, byte = string.match, string.gmatch, string.format, string.byte
  char = string.char
  concat, tunpack, call = table.concat, unpack, redis.call
end

-- Fails the call with `message` (an error reply, 'ERR ...'): raised as Redis 7's error
-- table, which it answers as it is; as text elsewhere (Redis 6.2 cannot raise a table:
-- its error handler concatenates what it is given), answered with the script's name and
-- line around it. The client finds its messages by their words (backends/_claims.py).
local function fail(message)
  if redis.REDIS_VERSION_NUM then error({err = message}) end
  error(message, 0)
end
