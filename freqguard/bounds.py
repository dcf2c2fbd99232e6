"""The numeric bounds every configuration and every time must respect, derived from the
encodings the two twins share (see ``freqguard/script/lua/prelude.lua``).

* Lua numbers are doubles: integers are exact only below 2^53, so every value the script
  computes (a time, a time plus a window, a bucket's arrival time, an expiry) stays below it.
* Stored times are 7-byte unsigned integers (``>I7``, below 2^56), counts and tokens 4-byte
  ones (``>I4``, below 2^32): both roomier than 2^53 and the limits below.
* A state can reach at most :data:`MAX_SPAN_US` ahead of the time it is judged at: a window,
  or the time a bucket takes to refill from empty (``capacity * interval``).
* Times are microseconds since the epoch, from 0 to :data:`MAX_TIME_US` (about the year
  2223), so that a time plus two spans and the slack of an expiry stays below 2^53.
* An exact sliding log keeps one entry per admitted unit; its limit is capped at
  :data:`MAX_LOG_LIMIT` so that one hit costs bounded time and memory on the server and in
  memory (docs/strategies/sliding-log.md gives the measured cost at the ceiling).
* A policy as a whole: at most :data:`MAX_RULES` rules, and at most
  :data:`MAX_POLICY_LOG_ENTRIES` sliding-log entries in all its logs, so that one hit's
  work and one recipient's record stay bounded however many rules each within its own
  bound a policy gathers.
"""

from __future__ import annotations

from freqguard.errors import ConfigError

__all__ = [
    "MAX_BURST",
    "MAX_LIMIT",
    "MAX_LOG_LIMIT",
    "MAX_POLICY_LOG_ENTRIES",
    "MAX_RULES",
    "MAX_SPAN_US",
    "MAX_TIME_US",
    "MAX_WINDOW_US",
    "check_time",
]

#: The longest window, and the longest a bucket may take to refill: ten years of 366 days.
MAX_WINDOW_US = 10 * 366 * 86_400 * 1_000_000
MAX_SPAN_US = MAX_WINDOW_US
#: The largest limit of a rate, and the largest burst (4-byte counts, with room).
MAX_LIMIT = 1_000_000_000
MAX_BURST = 1_000_000_000
#: The largest limit of a sliding-log rule (one entry per admitted unit).
MAX_LOG_LIMIT = 10_000
#: The most rules of one policy (every rule is checked by every hit of it).
MAX_RULES = 32
#: The most entries all the sliding logs of one policy can hold at once (one per admitted
#: unit: about 7 bytes each in a record, and the work of a hit that trims them).
MAX_POLICY_LOG_ENTRIES = 2 * MAX_LOG_LIMIT
#: The latest time, µs since the epoch: 2^53 less two spans and their slack, rounded down.
MAX_TIME_US = 8_000_000_000_000_000
assert MAX_TIME_US + 2 * MAX_SPAN_US + MAX_SPAN_US // 16 + 10**9 < 2**53


def check_time(now: int) -> int:
    """``now`` (µs) if it lies within the bounds every state can be computed in.

    Raises:
        ConfigError: for a time before the epoch or after :data:`MAX_TIME_US`.
    """
    if not 0 <= now <= MAX_TIME_US:
        raise ConfigError(
            f"time must be from 0 to {MAX_TIME_US} µs since the epoch (about the year 2223), "
            f"got {now} µs: the scripts compute in integers below 2^53"
        )
    return now
