"""The rolling window under per-key limits and numbers of every size
(docs/strategies/rolling-window.md): a stricter limit, then cleared, leaves the rule's own
window counting (the carry); limits of any size on every store; hostile numbers refused as
ConfigErrors; a ring moved to other windows decided alike on memory, Redis, binned Redis
and Redis Cluster. The rig is ``rolling_rig.py``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from tests.conformance.rolling_rig import US, _ring
from tests.conformance.test_differential import _assert_alike, _unique, ctx, op, rule
from tests.conftest import START, examples, flush
from tests.servers import RedisServer

# -- a stricter limit, then cleared: the rule's own window still counts ------------------------


def test_a_carry_goes_back_where_it_came_even_under_a_longer_window(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """10 per 100 s; 5 per second, 5 hits, carried once they leave its ring; then 20 per
    1000 s: the carry went back at (its leaving of the *own* window) - 1000 s, 900 s before
    it came, so it left the ring at once, and once cleared the rule admitted 15 in 3 s
    (review). It goes back at its newest unit's time."""
    guard = Guard(any_store, [_ring(10, 100 * US)], clock=clock)
    guard.set_limit("p", "rw.10.100s", "5 per 1 second", u="a")
    assert guard.hit("p", 5, u="a").allowed
    clock.advance(2)
    assert guard.hit("p", u="a").allowed  # the 5 are carried
    guard.set_limit("p", "rw.10.100s", "20 per 1000 seconds", u="a")
    assert guard.hit("p", u="a").allowed
    guard.clear_limit("p", "rw.10.100s", u="a")
    clock.advance(1)
    assert sum(guard.hit("p", u="a").allowed for _ in range(20)) == 3  # 10 in 100 s


def test_a_carry_past_four_bytes_saturates_alike(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """A carry goes back into one sub-window: past 2^32 - 1 units the Lua packed it 4 bytes
    wide and wrapped (2^32 + 5 read as 5), so Redis admitted where memory denied (review).
    A count saturates at 2^32 - 1, more than any rule's limit and cost: it decides alike."""
    n = 10**9
    guard = Guard(any_store, [_ring(n, 3600 * US)], clock=clock)
    guard.set_limit("p", f"rw.{n}.3600s", f"{n}/minute", u="a")
    for cost in (n, n, n, n, 2**32 - 4 * n + 5, 1):
        assert guard.hit("p", cost, u="a").allowed
        clock.advance(61)
    guard.clear_limit("p", f"rw.{n}.3600s", u="a")
    guard.refund("p", 1, u="a")  # a write
    decision = guard.hit("p", n - 10, u="a")
    assert (decision.allowed, decision.remaining) == (False, 0)


@settings(max_examples=examples(200))
@given(
    own=st.tuples(st.integers(1, 8), st.sampled_from([2, 5, 10])),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("hit"), st.integers(1, 3)),
            st.tuples(st.just("hit"), st.integers(1, 3)),
            st.tuples(st.just("wait"), st.integers(1, 3000)),  # ms
            # a limit of a shorter window (what leaves its ring is carried), or a longer one
            st.tuples(st.just("limit"), st.tuples(st.integers(1, 12), st.sampled_from([1, 200]))),
            st.tuples(st.just("clear"), st.just(0)),
        ),
        max_size=80,
    ),
)
def test_a_limit_cleared_never_lets_the_rule_admit_more_than_its_own_in_its_window(
    own: tuple[int, int], steps: list[tuple[str, Any]]
) -> None:
    """Against an exact log of every unit admitted: a hit admitted while no limit is in
    force never makes the rule's own window hold more than its limit, whatever limits of
    other windows and counts came and went before (the carry's promise; the review that
    found the carry put back too early under a longer limit checked it so)."""
    limit, window = own
    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock), [_ring(limit, window * US)], clock=clock)
    rule, admitted, limited, capacity = f"rw.{limit}.{window}s", [], False, limit
    for kind, arg in steps:
        if kind == "wait":
            clock.advance(arg / 1000)
        elif kind == "limit":
            guard.set_limit("p", rule, f"{arg[0]} per {arg[1]} seconds", u="a")
            limited, capacity = True, arg[0]
        elif kind == "clear":
            guard.clear_limit("p", rule, u="a")
            limited, capacity = False, limit
        elif arg <= capacity and guard.hit("p", arg, u="a").allowed:  # past it: refused
            now = clock.now_us()
            admitted += [now] * arg
            if not limited:
                held = sum(1 for t in admitted if t > now - window * US)
                assert held <= limit, (held, limit)


# -- limits of any size, on every store ------------------------------------------------------


def test_ten_million_in_120_seconds(any_store: SyncBackend, clock: ManualClock) -> None:
    """The issue's limit, and per-key limits beyond it, each unit counted once: sub-windows
    of 2 s, the first hit's [1000 s, 1002 s) counted whole until 1121.999999 s."""
    clock.set(START + 1000)
    policy = Policy(
        "bulk", Rule("10000000 per 120 seconds", by="tenant", strategy="rolling-window")
    )
    guard = Guard(any_store, [policy], clock=clock)
    first = guard.hit("bulk", 9_000_000, tenant="acme")
    assert first.allowed
    assert first.remaining == 1_000_000
    clock.advance(60)
    assert guard.hit("bulk", 1_000_000, tenant="acme").allowed
    denied = guard.hit("bulk", tenant="acme")
    assert not denied.allowed
    assert denied.retry_after == 61.999999
    assert (denied.remaining, denied.reset_after) == (0, 121.999999)
    assert guard.refund(first).remaining == 9_000_000
    guard.set_limit("bulk", "rw.10000000.120s", "1000000000 per 120 seconds", tenant="acme")
    for _ in range(99):
        assert guard.hit("bulk", 10_000_000, tenant="acme").allowed
    assert guard.hit("bulk", 9_000_000, tenant="acme").remaining == 0
    assert not guard.hit("bulk", tenant="acme").allowed
    clock.advance(122)  # the sub-windows of 1060 s and 1061 s have left
    assert guard.peek("bulk", tenant="acme").remaining == 1_000_000_000


# -- hostile numbers ---------------------------------------------------------------------------

NUMBER = st.one_of(
    st.integers(-2, 3),
    st.integers(10**9 - 1, 10**9 + 1),
    st.sampled_from([2**31, 2**53, 10**30]),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
)


@settings(max_examples=examples(150))
@given(
    limit=NUMBER,
    window=NUMBER | st.sampled_from([316_224_000, 316_224_001, 1e-7]),
    burst=NUMBER,
    shadow=NUMBER,
    calendar=st.booleans() | NUMBER,
    cost=NUMBER,
    per_key=st.sampled_from(["0/minute", "1000000001/minute", "5 concurrent", "x", None])
    | st.builds(lambda n, w: f"{n} per {w} seconds", st.integers(-1, 2 * 10**9), NUMBER),
)
def test_hostile_numbers_are_config_errors_naming_them_never_another_error(
    limit: Any, window: Any, burst: Any, shadow: Any, calendar: Any, cost: Any, per_key: Any
) -> None:
    """A rolling-window rule, its hit's cost and a per-key limit from numbers of every kind:
    either it decides, or a ConfigError says what was wrong; never another exception."""
    kwargs = {"shadow": shadow, "calendar": calendar}
    if burst is not None:
        kwargs["burst"] = burst
    said: list[str] = []
    try:
        made = Rule(f"{limit} per {window} seconds", by="u", strategy="rolling-window", **kwargs)
    except ConfigError as exc:
        made, said = None, [str(exc)]
    if made is not None:
        guard = Guard(MemoryBackend(), [Policy("p", made)], clock=ManualClock(START))
        for act in (
            lambda: guard.hit("p", cost, u="x"),
            lambda: guard.set_limit("p", made.id, per_key, u="x"),
            lambda: guard.hit("p", u="x"),
        ):
            try:
                act()
            except ConfigError as exc:
                said.append(str(exc))
    assert all(said)  # each refusal says what


# -- a ring moved to other windows, alike everywhere ---------------------------------------

# per-key limits of other windows (each moves the ring to another grain), cleared, and hits
limit_op = st.tuples(
    st.just("limit"),
    st.tuples(st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.integers(1, 6), st.integers(1, 30), st.integers(0, 20)),
)
ring_op = st.one_of(op, limit_op, st.tuples(st.just("hit"), st.integers(0, 2), st.just(1)))


@settings(max_examples=examples(40))
@given(
    rules=st.lists(rule([Strategy.ROLLING_WINDOW]), min_size=1, max_size=3),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(ring_op, min_size=1, max_size=40),
    start=st.sampled_from([1_700_000_000, 0]),
)
def test_rings_carried_to_other_windows_decide_alike_on_every_store(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    flush([redis_server, *redis_cluster])
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, _unique(rules), pool, ops, start)
