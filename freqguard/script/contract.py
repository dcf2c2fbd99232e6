"""Everything the Python twin (``freqguard/script/twin.py``, ``freqguard/script/strategies/``)
and the Lua twin (the Lua files ``freqguard/script/library.py`` joins) must agree on,
written once: the call's layout, modes, pack formats, function names and steps. Each
strategy's own facts (its code in the specs, its packed state) are in its module
(:mod:`freqguard.script.strategies`).

The Lua cannot import Python, so ``scripts/lua_contract.py`` writes these values, and each
twin module's, into ``freqguard/script/lua/contract.lua``, which the other Lua files read
(CI fails while it is stale: run the script after changing a value here). The Python twin
takes its values from here. ``tests/conformance/test_contract.py`` holds what cannot be
generated: how the Lua parses the specs and reads its arguments, its steps and their
order.

Pack formats are written in the Lua's ``struct`` notation: ``>`` big-endian, ``B`` one byte,
``In`` an unsigned integer of ``n`` bytes.
"""

from __future__ import annotations

import re

# The bounds a rule's own numbers are held to at construction, which the twins hold a per-key
# limit to as well (each strategy's ``limited``): the limit may have been set while its rule
# had another strategy. freqguard.bounds owns them; the Lua states them again.
from freqguard.bounds import MAX_LOG_LIMIT, MAX_SPAN_US

__all__ = [
    "ARGV",
    "ARGV_BINNED",
    "ARGV_STATES",
    "BACK_LIMIT",
    "BINS_OTHER",
    "BIN_ENTRY_HEADS",
    "BIN_LAYOUT",
    "BIN_META",
    "BIN_RECORD",
    "BLOB_HEAD",
    "CHECK",
    "CLAIM",
    "FIELD_HEAD",
    "HIT",
    "KEYING_WINDOW",
    "LAYOUT_STAMPS",
    "LIMIT",
    "LIMIT_CHANGE",
    "LIMIT_ENTRY",
    "MARK_SEPARATOR",
    "MAX_LOG_LIMIT",
    "MAX_SPAN_US",
    "MODES",
    "MOVING_LAYOUT",
    "OLDEST_BIN_LAYOUT",
    "OLDEST_LAYOUT",
    "OLD_SPEC_RULE",
    "OLD_TAG_BYTES",
    "PINNED_GRACE_MS",
    "PRUNE_FLOOR",
    "RECORD_LAYOUT",
    "RECORD_META",
    "REFUND",
    "REPLY_DROPPED",
    "REPLY_HEAD",
    "REPLY_LIMITS",
    "REPLY_STATE_LENGTH",
    "REPLY_WAIT",
    "RESET",
    "RUN_STEPS",
    "SPEC_RULE",
    "SPEC_STATE",
    "STALE_GRACE_US",
    "TWIN_FUNCTIONS",
    "UNCLAIMED",
    "WIDE_TAG_BYTES",
    "grows",
    "struct_codes",
    "widths",
]

#: The call's arguments (the Lua's ARGV), in order, each named as the Lua names its position
#: (``ARGV_NOW`` = 1, ...): the time (µs, or empty for the server's), the cost, the mode, the
#: specs; then :data:`ARGV_STATES`. The encoder (``backends/_resp.py``) and the Lua read the
#: positions from here; ``ScriptCall`` carries the same values under the same names.
ARGV = ("now", "cost", "mode", "specs")

#: What follows :data:`ARGV`: one field per state (its field in the record), then, for a
#: refund of one decision only, one mark per state (:data:`MARK_SEPARATOR`), or, for a
#: LIMIT call only, one change of the record's per-key limits (see :data:`LIMIT`).
ARGV_STATES = ("fields", "marks")

#: The ARGV of a call to the binned functions (``RedisBackend(bins=N)``): the record's
#: id in its bin (KEYS[1]) followed by the client's bins setting (:data:`BIN_RECORD`),
#: then :data:`ARGV` and :data:`ARGV_STATES` as above.
ARGV_BINNED = ("record", *ARGV)
#: A binned call's ``record``: the record's 8-byte id (``KeyLayout.bin``), then the client's
#: bins setting in this format.
BIN_RECORD = ">I4"
#: What a binned call that would write a bin holding no setting (a new bin, or one a
#: flush or a restart emptied) fails with, writing nothing: the client checks the store's
#: record of the setting again, claims the bin (a :data:`CLAIM` call) and sends the call
#: again. A bin holding another setting fails the call with
#: :data:`BINS_OTHER` and its setting.
UNCLAIMED = "freqguard unclaimed bin"
BINS_OTHER = "freqguard bins="

#: A bucket's refund mark is its numbers joined by this (``tat:back:born:interval``, the
#: interval the hit was charged at; receipts made before per-key limits have no interval);
#: a window's mark is one number; an empty mark: the hit took nothing there.
MARK_SEPARATOR = ":"

#: The script's modes (``mode``). LIMIT reads the record's per-key limits and, with a change
#: after the fields, sets one rule's (the words of :data:`LIMIT_CHANGE`) or clears it (its
#: tag alone); an empty change only reads them. A LIMIT call's cost is 1 when it sets
#: (it may grow what is stored), else 0. CLAIM (Lua only, a binned call of cost 1 and no
#: specs) claims its bin for the client's bins setting (:data:`UNCLAIMED`) and answers the
#: setting the bin holds.
HIT, CHECK, REFUND, RESET, LIMIT, CLAIM = 0, 1, 2, 3, 4, 5
MODES = {
    "HIT": HIT,
    "CHECK": CHECK,
    "REFUND": REFUND,
    "RESET": RESET,
    "LIMIT": LIMIT,
    "CLAIM": CLAIM,
}

#: A LIMIT call's change that sets a limit: these space-separated integers (``ttl``: µs from
#: the call's time, 0: for ever; ``exempt`` 0/1; then ``LIMIT_ENTRY``'s numbers;
#: ``keying``: the tag of the keying entry stored beside it, :data:`KEYING_WINDOW`).
LIMIT_CHANGE = ("tag", "ttl", "exempt", "limit", "window", "capacity", "interval", "keying")


def grows(mode: int, cost: int) -> bool:
    """Whether a call may grow what is stored: a hit that consumes, or a LIMIT call that
    sets. Every other call goes to the policy function's variant that Redis runs even when out
    of memory (the Lua's ``_nogrow`` name), which refuses a call that grows."""
    return cost > 0 and mode in (HIT, LIMIT, CLAIM)


#: The specs (``specs``, ``script.calls.spec_text``): space-separated integers, the number
#: of states, then per state these (its strategy's code, its shadow flag 0/1, its number of
#: rules, and the window and count it keeps: ``StateSpec.window`` and ``cap``, more than its
#: rules' under a tier of a shorter window, design note 103), each state followed by its
#: rules, these per rule (``RuleParams``' fields; shadow 0/1).
SPEC_STATE = ("code", "shadow", "rule_count", "window", "cap")
SPEC_RULE = ("capacity", "window", "interval", "shadow", "tag", "reserve", "burst", "keying")
#: The rule's numbers as the releases before keyings sent them (a receipt's fingerprint
#: names its specs so): ``SPEC_RULE`` without ``keying``.
OLD_SPEC_RULE = SPEC_RULE[:7]

#: The reply (one string): this head (flags: 1 allowed, plus :data:`REPLY_LIMITS` and
#: :data:`REPLY_DROPPED`; the µs the call was judged at), one wait
#: per rule (µs, in spec order), then per state its packed length and the packed state the
#: call leaves behind (length 0: none); then, when the flags say so, the record's per-key
#: limits, as stored (:data:`LIMIT_ENTRY` each).
REPLY_HEAD = ">BI8"
REPLY_WAIT = "I8"
REPLY_STATE_LENGTH = ">I4"
REPLY_LIMITS = 2
#: The flag that says the call found a record without a layout stamp (see
#: :data:`RECORD_LAYOUT`), dropped it and decided as if it were absent; the client logs it.
REPLY_DROPPED = 4

#: One per-key limit (an override of one rule for one partition value), as the record's
#: meta field stores it after :data:`RECORD_META`: the rule's tag (``SPEC_RULE``), its expiry
#: (µs on the time of the call that set it; 0: never), exempt (0/1), the rate's limit and
#: window (µs), and what the twins read: the capacity and the interval (µs per token,
#: buckets; else 0). A rule the call's specs name by that tag is decided with these numbers
#: while the entry lives; an exempt rule decides as a shadow rule (counted, never denying).
LIMIT_ENTRY = ">I4I7BI4I7I4I7"
#: A *keying entry* is a :data:`LIMIT_ENTRY` whose window is this (no rate's: past
#: :data:`MAX_SPAN_US`, and exact in a Lua number), stored beside a limit by the releases
#: after 0.3.0 (design note 117): its tag is the rule's *keying* (``SPEC_RULE``: from the
#: rule's name and its partition's dimension, at least 65,536, so never a 2-byte rule tag),
#: its limit the tag of the limit it goes with, its expiry that limit's. A limit that has
#: keying entries applies to a rule only where one is the rule's own keying: set for
#: ``tenant`` 17, it is not ``user`` 17's after a deploy that keys the rule by user. A limit
#: without any (an older release's) applies as it always did. Older releases read a keying
#: entry as a limit of no rule of theirs.
KEYING_WINDOW = 2**53 - 1

#: Lua only, stated here so that every format is read in one place: a state's field in its
#: Redis record starts with its expiry and the latest time it was written at (µs); the
#: record's meta field ("") holds its layout's stamp (:data:`LAYOUT_STAMPS` + the layout), its
#: expiry, its number of state fields and the count at which stale fields are next pruned,
#: then the record's per-key limits (:data:`LIMIT_ENTRY`).
FIELD_HEAD = ">I7I7"
RECORD_META = ">BI7I4I4"

#: The layout of the records this release writes in Redis, stated in each record: its meta
#: field starts with ``LAYOUT_STAMPS + RECORD_LAYOUT``. freqguard 0.1 wrote no stamp (its
#: meta field began with an expiry in µs, whose first byte stays below ``LAYOUT_STAMPS``
#: for every number the Lua stores, all below 2^53), and its layout changed twice without
#: one, so its records cannot be told apart: a call that finds a record without a stamp (or
#: with an unreadable meta field) drops it, decides as if it were absent and says so
#: (:data:`REPLY_DROPPED`). A record with a stamp above this release's layout is a newer
#: release's: the call fails naming both layouts and changes nothing, so an older client
#: never misreads it. See docs/upgrading.md.
#:
#: Layout 6 names a state's field by a 3-byte tag (``keys.KeyLayout.field_tag``), the
#: 2-byte tag layouts 2 and 3 named it by (:data:`OLD_TAG_BYTES`) and one more: a rule a
#: deploy adds read a removed rule's state whose 2-byte tag it shared (design note 79).
#: A record of layout 2, 3 or :data:`MOVING_LAYOUT` may hold states under their old names:
#: a call reads a state there when its own name is absent, and moves it when it writes.
#: A record is stamped :data:`MOVING_LAYOUT` while a field named the old way is left in it
#: (a state the call did not name: a rule for other priorities), 6 once none is.
#:
#: A state's 3-byte tag depends on its key id alone. Up to 0.3.0, states of one policy whose
#: first OLD_TAG_BYTES were alike were named by :data:`WIDE_TAG_BYTES` of their key ids
#: instead, whatever the layout; a call sends such a state's old name before its own, and
#: reads and moves it as above, in any layout (design note 94).
RECORD_LAYOUT = 6
MOVING_LAYOUT = 5
OLD_TAG_BYTES = 2
WIDE_TAG_BYTES = 6
LAYOUT_STAMPS = 0xF0
#: The oldest stamped layout this release reads: 2 stored every state in full (freqguard
#: 0.2 development builds), which later layouts read as it is.
OLDEST_LAYOUT = 2

#: Lua only, as :data:`FIELD_HEAD`: with bins (``RedisBackend(bins=N)``), records of
#: many partition values share one hash (a *bin*), each a string in its field, stamped
#: ``LAYOUT_STAMPS + BIN_LAYOUT``; it starts with ``BLOB_HEAD`` (the stamp, the record's
#: expiry), then the meta field's numbers as varints and its limits, then each state field
#: behind one of ``BIN_ENTRY_HEADS``: its expiry and latest in full, or its expiry and
#: its span (expiry - latest) in 4 or 5 bytes. The bin's own field "" holds
#: ``BIN_META``: its expiry, how many records it holds before stale ones are swept, and
#: the bins setting its records were written with (every write checks it: see
#: :data:`UNCLAIMED`). Layout 5 names states as :data:`RECORD_LAYOUT` does; a binned
#: record of layout 4 (:data:`OLDEST_BIN_LAYOUT`) is read as it is, its states under their
#: old names moved as a hash's are, and written as 5.
BIN_LAYOUT = 5
OLDEST_BIN_LAYOUT = 4
BLOB_HEAD = ">BI7"
BIN_META = ">I8I4I4"
BIN_ENTRY_HEADS = ("I7I7", "I7I4", "I7I5")

#: The functions both twins of a strategy define, under these names and in this order. The
#: Python twin has more that run on the client only (``decode``, ``mark``, ``report``,
#: ``horizon``, and helpers).
TWIN_FUNCTIONS = ("load", "check", "consume", "refund", "ttl", "limited")

#: The steps of the policy function, which both twins define under these names, in this
#: order, and call in this order (Python: ``twin.run``; Lua: ``run``). Each twin has more
#: that are its own (the Lua writes the record and frames the reply; Python reports).
RUN_STEPS = (
    "judged_at",
    "change_limits",
    "reset_states",
    "apply_limits",
    "load_states",
    "refund_states",
    "check_rules",
    "consume_states",
)

#: An expired state counts as absent at once, but is deleted only this long (µs) after its
#: expiry, in both backends: a clock that steps back by less finds it again.
STALE_GRACE_US = 1_000_000

#: Past this many µs given back by refunds, a bucket state starts a new generation (see
#: ``strategies.gcra.next_back``), so ``back`` stays exact in the Lua's doubles.
BACK_LIMIT = 2**50

#: The TTL grace (ms) of records written at a pinned time, which expire in real time (the
#: memory backend deletes pinned states alike, on its own clock); and (Lua only) how many
#: fields a record holds before its stale ones are pruned, which only calls on the server's
#: time do (a pinned time that jumps ahead must not prune what it would find coming back).
PINNED_GRACE_MS = 600_000
PRUNE_FLOOR = 8


_FIELD = re.compile(r"B|I(\d)")


def widths(fmt: str) -> tuple[int, ...]:
    """The byte width of each field of a format: ``widths(">BI7")`` is ``(1, 7)``, and
    ``widths("I8")`` (a field to append to a format) is ``(8,)``.

    Raises:
        ValueError: anything but big-endian ``B`` and ``In`` fields.
    """
    fields = fmt.removeprefix(">")
    if _FIELD.sub("", fields):
        raise ValueError(f"not a big-endian format of B and In fields: {fmt!r}")
    return tuple(int(n) if n else 1 for n in _FIELD.findall(fields))


_STRUCT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def struct_codes(fmt: str) -> str:
    """The fields of a format as Python :mod:`struct` codes (``">BI8"``: ``"BQ"``), for
    formats whose fields are 1, 2, 4 or 8 bytes wide.

    Raises:
        ValueError: a field of another width (Python reads those with ``int.from_bytes``).
    """
    try:
        return "".join(_STRUCT_CODES[w] for w in widths(fmt))
    except KeyError:
        raise ValueError(f"{fmt!r} has a field that Python's struct cannot read") from None
