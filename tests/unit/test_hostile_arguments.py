"""Every entry point's every argument under hostile values (an adversarial pass): each call
is accepted, or refused by freqguard itself with a short message naming the argument (a
ConfigError, TypeError or ValueError raised in freqguard's code), never a traceback from
deep inside (Python's ValueError from printing an integer past 4,300 digits, an
OverflowError, a RecursionError from printing a nested list, the error of a value's own
``__repr__``, ``__eq__`` or ``__hash__``, an AttributeError), never slow, and a refused
call on a guard writes nothing."""

from __future__ import annotations

import math
import re
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freqguard import (
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
)
from freqguard.decorators import capped
from freqguard.errors import shown
from freqguard.integrations.starlette import Limit, client_ip


class _Raises:
    """A value each of whose ``__repr__``, ``__str__``, ``__eq__`` and ``__hash__`` raise."""

    def __repr__(self) -> str:
        raise RuntimeError("its __repr__")

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("its __eq__")

    def __hash__(self) -> int:
        raise RuntimeError("its __hash__")


class _Number(int):
    """An int whose ``__repr__`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("its __repr__")

    __str__ = __repr__


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


FIXED = [
    10**5000, -(10**5000), math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, True, False,
    b"5", "5", "x" * 1_000_000, "9" * 1_000_000, "", "a\x00b", None, -1, 0,
    _nested(10_000), [10**5000], {"u": 10**5000}, _Raises(), _Number(3),
    Decimal("1.5"), Decimal("NaN"), Fraction(1, 3), object(),
]  # fmt: skip
GENERATED = st.one_of(
    st.integers(min_value=10**4300, max_value=10**4400),
    st.integers(max_value=-(10**4300)),
    st.floats(),
    st.decimals(),
    st.fractions(),
    st.text(max_size=50),
    st.binary(max_size=20),
    st.recursive(st.integers(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)),
)

P = Policy("p", Rule("5/minute", by="u", name="r"))
L = Policy("l", Rule("2 concurrent", by="u", name="c", lease=60))


def _guard() -> Guard:
    return Guard(MemoryBackend(), [P, L], clock=ManualClock(0))


def _f(u: object) -> object:
    return u


Call = Callable[[Guard, object], object]
# name: (a pattern the refusal must match, naming the argument; the call)
CALLS: dict[str, tuple[str, Call]] = {
    "hit cost": ("cost", lambda g, v: g.hit("p", cost=v, u="a")),  # type: ignore[arg-type]
    "hit context": ("u", lambda g, v: g.hit("p", u=v)),
    "hit policy": ("policy", lambda g, v: g.hit(v, u="a")),  # type: ignore[arg-type]
    "peek cost": ("cost", lambda g, v: g.peek("p", cost=v, u="a")),  # type: ignore[arg-type]
    "hit_many contexts": ("context|dimension", lambda g, v: g.hit_many("p", v)),  # type: ignore[arg-type]
    "hit_many a context": ("context|dimension", lambda g, v: g.hit_many("p", [v])),  # type: ignore[list-item]
    "hit_many cost": ("cost", lambda g, v: g.hit_many("p", [{"u": "a"}], cost=v)),  # type: ignore[arg-type]
    "refund cost": ("cost", lambda g, v: g.refund("p", v, u="a")),  # type: ignore[call-overload]
    "refund a decision": ("decision|policy", lambda g, v: g.refund(v)),  # type: ignore[call-overload]
    "release": ("decision", lambda g, v: g.release(v)),  # type: ignore[arg-type]
    "reset rules": ("rules", lambda g, v: g.reset("p", rules=v, u="a")),  # type: ignore[arg-type]
    "reset a rule": ("rule", lambda g, v: g.reset("p", rules=[v], u="a")),  # type: ignore[list-item]
    "set_limit rule": ("rule", lambda g, v: g.set_limit("p", v, "9/minute", u="a")),  # type: ignore[arg-type]
    "set_limit rate": ("rate", lambda g, v: g.set_limit("p", "r", v, u="a")),  # type: ignore[arg-type]
    "set_limit ttl": ("ttl", lambda g, v: g.set_limit("p", "r", "9/minute", ttl=v, u="a")),  # type: ignore[arg-type]
    "clear_limit rule": ("rule", lambda g, v: g.clear_limit("p", v, u="a")),  # type: ignore[arg-type]
    "limits_for context": ("u", lambda g, v: g.limits_for("p", u=v)),
    "acquire timeout": ("timeout", lambda g, v: g.acquire("p", timeout=v, u="a")),  # type: ignore[arg-type]
    "take_lease cost": ("cost", lambda g, v: g.take_lease("l", cost=v, u="a")),  # type: ignore[arg-type]
    "Guard prefix": ("prefix", lambda g, v: Guard(MemoryBackend(), prefix=v)),  # type: ignore[arg-type]
    "Guard on_error": ("on_error", lambda g, v: Guard(MemoryBackend(), on_error=v)),
    "Guard deny_cache": ("deny_cache", lambda g, v: Guard(MemoryBackend(), deny_cache=v)),  # type: ignore[arg-type]
    "Guard observers": ("observer", lambda g, v: Guard(MemoryBackend(), observers=v)),  # type: ignore[arg-type]
    "Guard clock": ("clock", lambda g, v: Guard(MemoryBackend(), clock=v)),  # type: ignore[arg-type]
    "Guard policies": ("polic", lambda g, v: Guard(MemoryBackend(), v)),  # type: ignore[arg-type]
    "Guard backend": ("backend", lambda g, v: Guard(v)),  # type: ignore[arg-type]
    "add_policy": ("polic", lambda g, v: g.add_policy(v)),  # type: ignore[arg-type]
    "MemoryBackend max_keys": ("max_keys", lambda g, v: MemoryBackend(max_keys=v)),  # type: ignore[arg-type]
    "MemoryBackend when_full": ("when_full", lambda g, v: MemoryBackend(when_full=v)),  # type: ignore[arg-type]
    "MemoryBackend clock": ("clock", lambda g, v: MemoryBackend(clock=v)),  # type: ignore[arg-type]
    "ManualClock": ("ManualClock", lambda g, v: ManualClock(v)),  # type: ignore[arg-type]
    "Rule rate": ("rate|rule", lambda g, v: Rule(v)),  # type: ignore[arg-type]
    "Rule by": ("by|dimension", lambda g, v: Rule("5/minute", by=v)),  # type: ignore[arg-type]
    "Rule name": ("name", lambda g, v: Rule("5/minute", name=v)),  # type: ignore[arg-type]
    "Rule strategy": ("strategy", lambda g, v: Rule("5/minute", strategy=v)),  # type: ignore[arg-type]
    "Rule burst": ("burst", lambda g, v: Rule("5/minute", strategy="token-bucket", burst=v)),  # type: ignore[arg-type]
    "Rule lease": ("lease", lambda g, v: Rule("5 concurrent", lease=v)),  # type: ignore[arg-type]
    "Rule caps": ("cap", lambda g, v: Rule("5/minute", caps=v)),  # type: ignore[arg-type]
    "Policy name": ("name", lambda g, v: Policy(v, Rule("5/minute"))),  # type: ignore[arg-type]
    "Rate count": ("limit", lambda g, v: Rate(v, timedelta(seconds=1))),  # type: ignore[arg-type]
    "Rate window": ("window", lambda g, v: Rate(5, v)),  # type: ignore[arg-type]
    "client_ip trusted_proxies": ("trusted", lambda g, v: client_ip(v)),  # type: ignore[arg-type]
    "client_ip header": ("header", lambda g, v: client_ip("10.0.0.0/8", header=v)),  # type: ignore[arg-type]
    "client_ip ipv4_prefix": ("ipv4_prefix", lambda g, v: client_ip(ipv4_prefix=v)),  # type: ignore[arg-type]
    "Limit path": ("path|route", lambda g, v: Limit(v, "5/minute")),  # type: ignore[arg-type]
    "Limit rule": ("rule|rate", lambda g, v: Limit("/a", v)),  # type: ignore[arg-type]
    "Limit key": ("key", lambda g, v: Limit("/a", "5/minute", key=v)),  # type: ignore[arg-type]
    "Limit methods": ("method", lambda g, v: Limit("/a", "5/minute", methods=v)),  # type: ignore[arg-type]
    "Limit cost": ("cost", lambda g, v: Limit("/a", "5/minute", cost=v)),  # type: ignore[arg-type]
    "capped rule": ("rule|rate|polic", lambda g, v: capped(v, "u", guard=g)(_f)),  # type: ignore[arg-type]
    "capped key": ("key", lambda g, v: capped("5/minute", v, guard=g)(_f)),  # type: ignore[arg-type]
    "capped guard": ("guard", lambda g, v: capped("5/minute", "u", guard=v)(_f)),  # type: ignore[arg-type]
    "capped cost": ("cost", lambda g, v: capped("5/minute", "u", guard=g, cost=v)(_f)),  # type: ignore[arg-type]
    "capped on_exceeded": (
        "on_exceeded",
        lambda g, v: capped("5/minute", "u", guard=g, on_exceeded=v)(_f),  # type: ignore[arg-type]
    ),
    "capped context": (
        "context|dimension",
        lambda g, v: capped("5/minute", "u", guard=g, context=v).__enter__(),  # type: ignore[arg-type]
    ),
}


def _state(guard: Guard) -> object:
    return (
        guard.peek("p", u="a").remaining,
        guard.limits_for("p", u="a"),
        len(guard.backend),  # type: ignore[arg-type]
    )


def _refusal_is_ours(argument: str, error: BaseException) -> None:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    assert "/freqguard/" in frame.filename, f"raised in {frame.filename}:{frame.lineno}"
    assert isinstance(error, (ConfigError, TypeError, ValueError)), repr(type(error))
    message = str(error)
    assert len(message) < 500, message[:600]
    assert re.search(argument, message, re.IGNORECASE), f"{argument!r} not in {message!r}"


def _taken_or_refused_naming_it(
    name: str, value: object, calls: dict[str, tuple[str, Call]] = CALLS
) -> None:
    argument, call = calls[name]
    guard = _guard()
    before = _state(guard)
    started = time.perf_counter()
    try:
        call(guard, value)
    except Exception as error:  # what was raised is the claim
        _refusal_is_ours(argument, error)
        assert _state(guard) == before, "a refused call wrote state"
    assert time.perf_counter() - started < 2.0


def sweep(
    calls: dict[str, tuple[str, Call]], drawn: int
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two tests of a table of calls: each of :data:`FIXED` given to each, and
    ``drawn`` values of :data:`GENERATED` each (a module binds them to ``test_`` names)."""

    @pytest.mark.parametrize(
        ("name", "index"),
        [(name, index) for name in calls for index in range(len(FIXED))],
    )
    def each(name: str, index: int) -> None:
        _taken_or_refused_naming_it(name, FIXED[index], calls)

    @pytest.mark.parametrize("name", list(calls))
    @settings(max_examples=drawn, deadline=None, suppress_health_check=list(HealthCheck))
    @given(value=GENERATED)
    def drawn_one(name: str, value: object) -> None:
        _taken_or_refused_naming_it(name, value, calls)

    return each, drawn_one


(
    test_each_hostile_value_is_taken_or_refused_naming_it,
    test_a_drawn_hostile_value_is_taken_or_refused_naming_it,
) = sweep(CALLS, 25)


@pytest.mark.parametrize("value", FIXED, ids=lambda v: type(v).__name__)
def test_shown_shows_any_value_short(value: object) -> None:
    assert len(shown(value)) <= 100
