"""@capped: every decorated function has a cap of its own unless it names one, and a rule
that cannot work fails when the function is decorated, not when it is first called."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.decorators import capped, configure
from freqguard.rules import fit_name


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    return Guard(MemoryBackend(), [Policy("sms", Rule("2/minute", by="recipient"))], clock=clock)


def _vendor_call(guard: Guard, vendor: str, rate: str = "2/minute") -> Callable[[], str]:
    @capped(rate, guard=guard)
    def call() -> str:
        return vendor

    return call


def test_functions_made_by_a_factory_have_caps_of_their_own(guard: Guard) -> None:
    a, b = _vendor_call(guard, "a"), _vendor_call(guard, "b")
    assert [a(), a()] == ["a", "a"]
    with pytest.raises(CapExceeded):
        a()
    assert [b(), b()] == ["b", "b"]  # b's cap is not a's


def test_factory_functions_with_different_rates_both_work(guard: Guard) -> None:
    slow, fast = _vendor_call(guard, "slow", "1/minute"), _vendor_call(guard, "fast", "3/minute")
    assert slow() == "slow"
    assert [fast(), fast(), fast()] == ["fast"] * 3


def test_one_capped_object_decorating_two_functions_caps_each(guard: Guard) -> None:
    once = capped("1/minute", guard=guard)

    @once
    def first() -> int:
        return 1

    @once
    def second() -> int:
        return 2

    assert (first(), second()) == (1, 2)
    with pytest.raises(CapExceeded):
        first()


def test_a_name_shares_one_cap_on_purpose(guard: Guard) -> None:
    @capped("2/minute", guard=guard, name="vendor-x")
    def send() -> str:
        return "send"

    @capped("2/minute", guard=guard, name="vendor-x")
    def poll() -> str:
        return "poll"

    assert (send(), poll()) == ("send", "poll")
    with pytest.raises(CapExceeded) as caught:
        send()
    assert caught.value.decision.policy == "vendor-x"


@capped("1/minute", on_exceeded=lambda decision: decision.policy)
def ping() -> str:
    return "pong"


def _made(guard: Guard) -> Callable[[], str]:
    @capped("1/minute", guard=guard, on_exceeded=lambda decision: decision.policy)
    def f() -> str:
        return "ran"

    return f


def test_implicit_names_are_module_and_qualname_numbered_only_when_taken(
    guard: Guard, clock: ManualClock
) -> None:
    configure(MemoryBackend(clock))
    assert ping() == "pong"
    assert ping() == f"capped.{__name__}.ping"  # stable across processes: no number
    first, second = _made(guard), _made(guard)
    assert (first(), second()) == ("ran", "ran")
    names = [first(), second()]
    base = f"capped.{__name__}._made.<locals>.f"  # as fitted to a name: with a digest
    numbered = {fit_name(base)} | {fit_name(f"{base}.{n}") for n in range(2, 1000)}
    assert names[0] != names[1]
    assert set(names) <= numbered  # later ones numbered: base.2, ...


def test_a_rate_typo_fails_at_decoration(guard: Guard) -> None:
    with pytest.raises(ConfigError, match="'5/minuet'"):
        capped("5/minuet", guard=guard)
    with pytest.raises(ConfigError, match="'10 per minuet'"):
        capped(["1/second", "10 per minuet"], guard=guard)
    with pytest.raises(ConfigError, match="'0/minute'"):
        capped("0/minute", guard=guard)


def test_an_unknown_policy_name_fails_at_decoration(guard: Guard, clock: ManualClock) -> None:
    with pytest.raises(ConfigError, match=r"'smss'.*neither a rate.*registered: sms"):
        capped("smss", key="recipient", guard=guard)
    configure(MemoryBackend(clock), policies=[Policy("email", Rule("1/minute", by="to"))])
    capped("email", key="to")  # the default guard knows it
    with pytest.raises(ConfigError, match=r"'sms'.*registered: email"):
        capped("sms", key="recipient")  # the default guard does not
    with pytest.raises(ConfigError, match="'smss'"):
        capped("smss", guard=AsyncGuard(MemoryBackend(), clock=clock))


def test_bad_names_fail_at_decoration(guard: Guard) -> None:
    with pytest.raises(ConfigError, match="policy name"):
        capped("1/minute", guard=guard, name="has space")
    with pytest.raises(ConfigError, match=r"name.*'sms' already names"):
        capped("sms", key="recipient", guard=guard, name="other")


def test_a_name_clash_surfaces_at_decoration_on_an_explicit_guard(guard: Guard) -> None:
    @capped("2/minute", key="user", guard=guard, name="shared")
    def one(user: str) -> None: ...

    with pytest.raises(ConfigError, match="'shared'"):

        @capped("5/minute", key="user", guard=guard, name="shared")
        def two(user: str) -> None: ...


def test_async_factory_functions_have_caps_of_their_own(clock: ManualClock) -> None:
    aguard = AsyncGuard(MemoryBackend(), clock=clock)

    def make(vendor: str) -> Callable[[], object]:
        @capped("1/minute", guard=aguard, on_exceeded="skip")
        async def call() -> str:
            return vendor

        return call

    a, b = make("a"), make("b")

    async def run() -> list[object]:
        return [await a(), await a(), await b()]  # type: ignore[misc]

    assert asyncio.run(run()) == ["a", None, "b"]


def test_blocks_with_different_rules_do_not_clash(guard: Guard) -> None:
    with capped("1/minute", guard=guard, context={"user": "u"}):
        pass
    with capped("5/minute", guard=guard, context={"user": "u"}):  # its own cap
        pass
    with pytest.raises(CapExceeded), capped("1/minute", guard=guard, context={"user": "u"}):
        pass  # equal rules, equal dimensions: the first block's cap
    with capped("1/minute", guard=guard, context={"user": "u"}, name="other-block"):
        pass


def test_a_key_that_does_not_fit_the_default_guards_policy_fails_at_decoration(
    clock: ManualClock,
) -> None:
    """docs/integrations.md: a key "whose dimensions do not fit the registered policy it
    names" fails at decoration. With no ``guard=`` (the default guard, configured first) it
    was decorated, and its first call failed naming no fix (a new user's first hour)."""
    policy = Policy("sms2", Rule("2 per 59 seconds", by=("recipient", "content")))
    configure(MemoryBackend(clock), policies=[policy])
    with pytest.raises(ConfigError, match=r"write key=\{'recipient': \.\.\., 'content'"):

        @capped("sms2", key="to")
        def send(to: str) -> str:
            return to
