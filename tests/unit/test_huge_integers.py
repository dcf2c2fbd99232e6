"""An integer of more digits than Python prints (4,300) given where the API takes a number:
a ConfigError naming the argument and what it takes, never Python's ValueError from the
message that printed it, nor an OverflowError from a float made of it (an adversarial pass
on the entry points' numbers). The number is shown by its count of digits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rate,
    Rule,
    TierRates,
)
from freqguard.engine.breaker import Breaker
from freqguard.observe.tally import check_buckets

BIG = 10**5000
P = Policy("p", Rule("5/minute", by="u", name="r"))


def _guard() -> Guard:
    return Guard(MemoryBackend(), [P], clock=ManualClock(0))


def _async(call: Callable[[AsyncGuard], object]) -> Callable[[], object]:
    async def run() -> object:
        guard = AsyncGuard(MemoryBackend(), [P], clock=ManualClock(0))
        return await call(guard)  # type: ignore[misc]

    return lambda: asyncio.run(run())


CALLS: dict[str, tuple[str, Callable[[], object]]] = {
    "hit cost": ("cost", lambda: _guard().hit("p", cost=BIG, u="a")),
    "hit_many cost": ("cost", lambda: _guard().hit_many("p", [{"u": "a"}], cost=BIG)),
    "peek cost": ("cost", lambda: _guard().peek("p", cost=BIG, u="a")),
    "async hit cost": ("cost", _async(lambda g: g.hit("p", cost=BIG, u="a"))),
    "burst": ("burst", lambda: Rule("5/minute", strategy="token-bucket", burst=BIG)),
    "lease": ("lease", lambda: Rule("5 concurrent", lease=BIG)),
    "a lease beside a rate": ("lease", lambda: Rule("5/minute", lease=BIG)),
    "rate tuple": ("rate", lambda: Rule((BIG, 60))),  # type: ignore[arg-type]
    "ttl": ("ttl", lambda: _guard().set_limit("p", "r", "9/minute", ttl=BIG, u="a")),
    "acquire timeout": ("timeout", lambda: _guard().acquire("p", timeout=BIG, u="a")),
    "async acquire timeout": (
        "timeout",
        _async(lambda g: g.acquire("p", timeout=BIG, u="a")),
    ),
    "a Rate's count": ("limit", lambda: Rate(BIG, timedelta(seconds=1))),
    "deny_cache": ("deny_cache", lambda: Guard(MemoryBackend(), [P], deny_cache=BIG)),
    "a cap": ("cap", lambda: Rule("5/minute", caps={"a": BIG})),
    "Breaker cooldown": ("cooldown", lambda: Breaker(cooldown=BIG)),
    "metrics buckets": ("buckets", lambda: check_buckets((1.0, BIG))),
    "a tier's rate": ("", lambda: TierRates("plan", {"gold": (BIG, 60)})),  # type: ignore[dict-item]
    "quiet exempt": ("exempt", lambda: QuietHours("22:00", "07:00", tz="UTC", exempt=[BIG])),  # type: ignore[list-item]
    "a policy's rule": ("Rule", lambda: Policy("q", BIG)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(CALLS))
def test_an_integer_past_the_printable_digits_is_a_config_error_naming_it(name: str) -> None:
    argument, call = CALLS[name]
    with pytest.raises(
        ConfigError, match=rf"{argument}.*(an|a negative) integer of (5001|more than 4,300) digits"
    ) as refused:
        call()
    assert len(str(refused.value)) < 400
