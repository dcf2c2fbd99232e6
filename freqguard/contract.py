"""Everything the Python twin (``freqguard/script.py``, ``freqguard/strategies/``) and the Lua
twin (``freqguard/lua/policy.lua``) must agree on, written once.

The Lua cannot import Python, so it states each value again; ``tests/test_contract.py`` reads
the Lua's constants, its strategy table and its twin functions and holds them to this module
both ways. Change a value here and that test says where the Lua must follow.
"""

from __future__ import annotations

__all__ = [
    "BACK_LIMIT",
    "CHECK",
    "HIT",
    "MODES",
    "PINNED_GRACE_MS",
    "PRUNE_FLOOR",
    "REFUND",
    "RESET",
    "STALE_GRACE_US",
    "STRATEGY_CODES",
    "TWIN_FUNCTIONS",
]

#: The script's modes (ARGV[3]).
HIT, CHECK, REFUND, RESET = 0, 1, 2, 3
MODES = {"HIT": HIT, "CHECK": CHECK, "REFUND": REFUND, "RESET": RESET}

#: A strategy's number in the plan (ARGV[4]); the Lua's ``TWINS`` table lists its twins in
#: this order.
STRATEGY_CODES = {"fixed-window": 1, "sliding-log": 2, "token-bucket": 3, "gcra": 4}

#: The functions both twins of a strategy define, under these names and in this order. The
#: Python twin has more that run on the client only (``decode``, ``mark``, ``report``,
#: ``max_ttl``, and helpers).
TWIN_FUNCTIONS = ("load", "check", "consume", "refund", "ttl")

#: An expired state counts as absent at once, but is deleted only this long (µs) after its
#: expiry, in both backends: a clock that steps back by less finds it again.
STALE_GRACE_US = 1_000_000

#: Past this many µs given back by refunds, a bucket state starts a new generation (see
#: ``strategies.gcra.next_back``), so ``back`` stays exact in the Lua's doubles.
BACK_LIMIT = 2**50

#: Lua only, stated here so that both sides are read in one place: the TTL grace (ms) of
#: records written at a pinned time, and how many fields a record holds before its stale
#: ones are pruned.
PINNED_GRACE_MS = 600_000
PRUNE_FLOOR = 8
