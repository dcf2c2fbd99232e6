"""Strategies: the registry of how rules count, and the bounds each one's state can hold."""

from __future__ import annotations

from enum import Enum

from freqguard.bounds import MAX_BURST, MAX_LIMIT, MAX_LOG_LIMIT, MAX_SPAN_US
from freqguard.errors import ConfigError, shown
from freqguard.rates import Rate

__all__ = ["Strategy", "check_bounds"]


class Strategy(str, Enum):
    """How a rule counts. See docs/strategies.md for the exact guarantee of each.

    The registry of strategies: each member's line holds every fact of it the rest of the
    package reads (the word users write, the short name in derived rule ids, whether it is a
    bucket, whose ``burst`` sets its capacity, and the largest limit it takes). Its twins
    are found by its name (``FIXED_WINDOW``: ``script/strategies/fixed_window.py`` and
    ``fixed_window.lua``), its page by its word (``docs/strategies/fixed-window.md``);
    ``tests/conformance/test_strategy_parts.py`` names what a new member still lacks.
    """

    # the word users write, short name, a bucket, the largest limit (its own bound)
    FIXED_WINDOW = ("fixed-window", "fw", False, MAX_LIMIT)
    SLIDING_LOG = ("sliding-log", "sl", False, MAX_LOG_LIMIT)
    TOKEN_BUCKET = ("token-bucket", "tb", True, MAX_LIMIT)
    GCRA = ("gcra", "gcra", True, MAX_LIMIT)
    CONCURRENCY = ("concurrency", "cc", False, MAX_LOG_LIMIT)  # "10 concurrent", lease=60
    ROLLING_WINDOW = ("rolling-window", "rw", False, MAX_LIMIT)  # never over, any limit

    short: str  # in a rule's derived id (``sl.5.60s``) and in its keys
    uses_burst: bool  # a bucket: ``burst`` (default: the limit) is its capacity
    max_limit: int  # below MAX_LIMIT: a state that grows with the limit (a log's entries)

    # the defaults are never used (every member states its facts): they let a type checker
    # read ``Strategy("gcra")`` as the lookup by value it is
    def __new__(
        cls, value: str, short: str = "", uses_burst: bool = False, max_limit: int = MAX_LIMIT
    ) -> Strategy:
        member = str.__new__(cls, value)
        member._value_ = value
        member.short, member.uses_burst, member.max_limit = short, uses_burst, max_limit
        return member

    @classmethod
    def parse(cls, value: Strategy | str) -> Strategy:
        """Accept a member, its value (``"sliding-log"``) or its name (``"SLIDING_LOG"``)."""
        if isinstance(value, Strategy):
            return value
        if isinstance(value, str):
            wanted = value.strip().lower().replace("_", "-")
            for member in cls:
                if member.value == wanted:
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        name = value.strip().lower().replace("_", "-") if isinstance(value, str) else ""
        meant = (
            f"; {peer_name(name)} is strategy={PEER_NAMES[name][1]!r} here{_PEER_WHY.get(name, '')}"
            if (name in PEER_NAMES)
            else ""
        )
        raise ConfigError(f"unknown strategy {shown(value)}{meant}; allowed: {allowed}")


#: Peers' names of strategies, and ours for them: (whose, ours). ``limits`` (and
#: Flask-Limiter, slowapi): the exact log for its moving window, the rolling window for
#: its counter; throttled-py: the token bucket for its leaking bucket (they admit alike),
#: the rolling window for its sliding window (a counter). A counter's translation is the
#: rolling window, not the exact log: both keep a fixed state at any limit, where the log
#: stops at 10,000 (docs/coming-from/limits.md and throttled-py.md say the same).
PEER_NAMES = {
    "moving-window": ("limits'", "sliding-log"),
    "sliding-window-counter": ("limits'", "rolling-window"),
    "leaking-bucket": ("throttled-py's", "token-bucket"),
    "sliding-window": ("throttled-py's", "rolling-window"),
}
_PEER_NOTES = {"sliding-window": " (a counter)"}
#: why, for the counters: said after the name of ours
_COUNTER = (
    ": a state of fixed size at any limit, as the counter's, never over the limit in a "
    f"window, where the counter may be ('sliding-log' is exact, for limits up to {MAX_LOG_LIMIT})"
)
_PEER_WHY = {"sliding-window": _COUNTER, "sliding-window-counter": _COUNTER}


def peer_name(name: str) -> str:
    """A peer's strategy name as a message says it: ``throttled-py's 'leaking-bucket'``."""
    return f"{PEER_NAMES[name][0]} {name!r}{_PEER_NOTES.get(name, '')}"


def check_bounds(rate: Rate, strategy: Strategy, burst: int | None, name: str | None) -> None:
    """Refuse what the encodings cannot hold exactly (see :mod:`freqguard.bounds`), and a
    burst a strategy does not take or no bucket holds."""
    label = f"rule {name or str(rate)!r}"
    if burst is not None:
        if not strategy.uses_burst:
            raise ConfigError(
                f"burst applies to token-bucket and gcra only, not {strategy.value} "
                f"(rule {name or rate!s})"
            )
        if isinstance(burst, bool) or not isinstance(burst, int) or not 0 < burst <= MAX_BURST:
            raise ConfigError(f"burst must be an integer from 1 to {MAX_BURST}, got {shown(burst)}")
    if rate.limit > strategy.max_limit:
        same = "strategy='rolling-window' for the same cap in every window (never over it, at"
        same += " any limit, admitting a little less than an exact log), "
        raise ConfigError(
            f"{label}: a {strategy.value} rule keeps state that grows with its limit, so its "
            f"limit is at most {strategy.max_limit}, got {rate.limit}; use "
            f"{same if strategy is Strategy.SLIDING_LOG else ''}strategy='gcra' (or "
            f"'token-bucket') for a smooth rate, or 'fixed-window' for a cheap counter"
        )
    if strategy.uses_burst:
        capacity = burst if burst is not None else rate.limit
        refill = capacity * -(-rate.window_us // rate.limit)
        if refill > MAX_SPAN_US:
            raise ConfigError(
                f"{label}: a bucket of {capacity} at one token per "
                f"{-(-rate.window_us // rate.limit)} µs takes {refill} µs to refill, more "
                f"than the bound of {MAX_SPAN_US} µs (10 years); lower the burst"
            )
