"""A newcomer's first hour (an experienced user of limits, Flask-Limiter and DRF), from a
clean clone, following the README and the docs: the API findings, each a failing test.
Memory backend, pinned time, no I/O, no sleeps."""

from __future__ import annotations

import datetime as dt
import tracemalloc
from pathlib import Path

from freqguard import Guard, ManualClock, MemoryBackend, Policy, QuietHours, Rule

# 2026-06-11 20:00 UTC: 22:00 in Berlin, inside quiet hours 21:00-08:00
_BERLIN_22H = dt.datetime(2026, 6, 11, 20, 0, tzinfo=dt.timezone.utc).timestamp()


def _push_guard() -> Guard:
    """The README's "push" policy (README.md, the QuietHours block), on a pinned clock."""
    push = Policy(
        "push",
        Rule("3/day", by="recipient", calendar=True, tz_from="tz", caps={"marketing": 2}),
        priorities=("transactional", "marketing"),
        quiet=QuietHours("21:00", "08:00", tz_from="tz", exempt=("transactional",)),
    )
    return Guard(MemoryBackend(), [push], ManualClock(_BERLIN_22H))


def test_quiet_hours_are_not_advertised_as_a_quota_of_a_billion_in_ratelimit_policy() -> None:
    """What I did: built the README's "push" policy (README.md, the block with
    ``QuietHours("21:00", "08:00", ...)``) and, as I would behind an HTTP API, put
    ``decision.headers("ietf")`` on the response of a marketing hit at 22:00 in Berlin
    (docs/integrations.md, "Headers": ``RateLimit-Policy`` lists the rules with ``q`` their
    quota).

    What happened: ``RateLimit-Policy`` is ``"cal.3.day";q=3;w=86400,
    "quiet-hours";q=1000000000;w=86400``: the quiet hours are advertised to clients as a
    quota of one billion requests a day. docs/messaging.md:152-153 says of the quiet-hours
    pseudo-rule "It has no rate", and ``freqguard.headers.binding_rule``'s docstring says
    "their pseudo-rule's rate is no one's", yet the header lists it with one.

    Expected: ``RateLimit-Policy`` lists the policy's rules with a quota (``cal.3.day``),
    and no ``quiet-hours`` item with a made-up ``q``."""
    guard = _push_guard()
    late = guard.hit("push", recipient="dana", tz="Europe/Berlin", priority="marketing")
    assert not late.allowed  # quiet hours: denied until 08:00
    policy_header = late.headers("ietf")["RateLimit-Policy"]
    assert "q=1000000000" not in policy_header, policy_header


def test_manual_clock_advance_takes_a_timedelta_or_says_it_wants_seconds() -> None:
    """What I did: wrote a test of my SMS policy with ``ManualClock`` (docs/concepts.md:75-76:
    "``ManualClock(start)`` with ``advance``, ``set``") and moved time with
    ``clock.advance(timedelta(minutes=1))``, as the same docs let me write
    ``Rate(50, timedelta(days=1))`` (docs/concepts.md:6) and ``set_limit(..., ttl=timedelta(
    hours=24))`` (docs/limits.md, "ttl: seconds or a timedelta").

    What happened: ``TypeError: '<' not supported between instances of
    'datetime.timedelta' and 'int'``: an internal comparison's error, that says neither which
    argument nor what it takes.

    Expected: either the clock advances by the timedelta (as ``ttl=`` takes one), or the
    error names ``advance`` and says it takes seconds."""
    clock = ManualClock(1_000.0)
    try:
        clock.advance(dt.timedelta(minutes=1))
    except (TypeError, ValueError) as error:
        message = str(error)
        assert "advance" in message, message
        assert "seconds" in message, message
    else:
        assert clock.now() == 1_060.0


def test_a_memory_state_of_an_api_rate_is_within_the_size_concepts_states() -> None:
    """What I read: docs/concepts.md:86-88: "``MemoryBackend()`` keeps at most 100,000 states
    by default (about 45 MB; a policy keeps one state per rule and context, 100-500 bytes
    each)". So I protected my HTTP API with the default backend and the default strategy,
    ``Rule("1000/hour", by="user")``, expecting at most ~45 MB at the bound.

    What happened: a user's state at that rate, once used, holds ~9,000 bytes (a sliding
    log keeps an entry a hit; docs/strategies/sliding-log.md:61 gives 80 KB at 10,000), so
    the default bound of 100,000 states is ~900 MB, twenty times what concepts.md says;
    the 100-500 bytes hold only for small limits like the SMS policy's.

    Expected: the page's figure holds for the rates it does not exclude, or the page says
    a sliding log's state grows with its limit (about 9 bytes a hit held) and what the
    bound then costs: it now does."""
    guard = Guard(MemoryBackend(), [Policy("api", Rule("1000/hour", by="user"))], ManualClock(1e9))
    guard.hit("api", user="warm-up")  # the policy's compiled plan, not a state's bytes
    users = 4
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for user in range(users):
            for _ in range(1000):
                guard.hit("api", user=user)
        per_state = (tracemalloc.get_traced_memory()[0] - before) / users
    finally:
        tracemalloc.stop()
    # the page now says a sliding log's state grows with what it holds (~9 bytes a unit)
    assert 500 < per_state <= 12_000, f"{per_state:.0f} bytes a state"
    concepts = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    assert "about 9 bytes a unit it holds" in " ".join(concepts.split())
