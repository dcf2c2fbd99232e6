"""The differential replay on messaging rules: calendar rules (fixed zones and each hit's
own) beside rolling ones, rules for some priorities only or capped for one, and quiet hours,
with hits an hour or a day apart across local midnights and the DST changes of New York and
Berlin; memory, Redis, Redis in bins and Redis Cluster decide alike. The rules and
operations it builds on, and the replay, are ``test_differential.py``'s."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from freqguard import MemoryBackend, QuietHours, Rule
from freqguard.backends.redis import RedisBackend
from tests.conformance.test_differential import DIMS, VALUES, _assert_alike, _unique, op, rule
from tests.conftest import examples, flush
from tests.servers import RedisServer

ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]


@st.composite
def calendar_rule(draw: st.DrawFn) -> Rule:
    period = draw(st.sampled_from(["1 day", "7 days", "1 month"]))
    zone = draw(st.sampled_from([None, *ZONES]))  # None: each hit's own (tz_from)
    return Rule(
        f"{draw(st.integers(1, 5))} per {period}",
        draw(st.sampled_from(DIMS[1:])),
        calendar=True,
        tz=zone,
        tz_from="tz" if zone is None else None,
        shadow=draw(st.integers(0, 4)) == 0,
    )


calendar_ctx = st.fixed_dictionaries(
    {
        "u": st.sampled_from(VALUES),
        "c": st.sampled_from(VALUES),
        "tz": st.sampled_from(ZONES),
        "priority": st.sampled_from(["t", "m"]),
    }
)


@st.composite
def priority_rule(draw: st.DrawFn) -> Rule:
    """A rule for one priority only, or capped for one (its capacity permitting)."""
    r = draw(rule())
    only = draw(st.sampled_from([None, ("m",), ("t",)]))
    caps = None
    if r.capacity > 1 and draw(st.booleans()):
        capped = draw(st.sampled_from(only or ("t", "m")))
        caps = {capped: draw(st.integers(1, r.capacity - 1))}
    return Rule(r.rate, r.by, r.strategy, burst=r.burst, shadow=r.shadow, only=only, caps=caps)


@st.composite
def quiet_hours(draw: st.DrawFn) -> QuietHours | None:
    start = draw(st.sampled_from(["21:00", "00:30", "12:00", "23:59", "01:30"]))
    end = draw(
        st.sampled_from(["08:00", "06:45", "00:00", "13:00", "03:00"]).filter(
            lambda end: end != start
        )
    )
    zone = draw(st.sampled_from([None, "UTC", "America/New_York"]))  # None: the hit's
    exempt = draw(st.sampled_from([(), ("t",)]))
    if draw(st.booleans()):
        return None
    return QuietHours(start, end, tz=zone, tz_from="tz" if zone is None else None, exempt=exempt)


calendar_op = st.one_of(
    op,
    st.tuples(st.just("hours"), st.just(0), st.integers(1, 30)),
    st.tuples(st.just("hours"), st.just(0), st.integers(1, 3)),
)
# just before local midnights and the 2026 DST changes of New York and Berlin, and 0
DAY_EDGES = [
    1_772_945_999,  # 2026-03-08 04:59:59 UTC: New York's last second before a 23-hour day
    1_793_505_599,  # 2026-11-01 03:59:59 UTC: before its 25-hour day
    1_774_738_799,  # 2026-03-28 22:59:59 UTC: Berlin, before its 23-hour day
    1_792_879_199,  # 2026-10-24 21:59:59 UTC: before its 25-hour day
    0,
]


@settings(max_examples=examples(60))
@example(  # a batch on a new bin: its denied second hit ran before the first's write
    rules=[Rule("1/day", by="u", calendar=True, tz_from="tz", shadow=True)],
    quiet=QuietHours("21:00", "08:00", tz_from="tz"),
    pool=[
        {"u": "a", "c": "a", "tz": "Asia/Shanghai", "priority": "t"},
        {"u": "a", "c": "a", "tz": "UTC", "priority": "t"},
    ],
    ops=[("many", [0, 1], 1)],
    start=1_772_945_999,
)
@given(
    rules=st.lists(calendar_rule() | rule() | priority_rule(), min_size=1, max_size=3),
    quiet=quiet_hours(),
    pool=st.lists(calendar_ctx, min_size=1, max_size=3),
    ops=st.lists(calendar_op, min_size=1, max_size=40),
    start=st.sampled_from(DAY_EDGES),
)
def test_messaging_rules_decide_alike(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    quiet: QuietHours | None,
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    """Calendar rules (fixed zones and each hit's own) beside rolling ones, rules for some
    priorities only or capped for one, quiet hours (crossing midnight or not, exempting a
    priority or not); hits an hour or a day apart across local midnights and DST changes,
    zones and priorities changing between hits of a partition, per-key limits."""
    flush([redis_server, *redis_cluster])
    # priorities nothing refers to are refused (an option that cannot apply)
    prioritized = (quiet is not None and quiet.exempt) or any(r.only or r.caps for r in rules)
    policy = _unique(rules, ("t", "m") if prioritized else (), quiet)
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, policy, pool, ops, start)
