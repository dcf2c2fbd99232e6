"""Shared fixtures: a pinned clock and the backend matrix every behaviour test runs on."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

import pytest
from hypothesis import HealthCheck, settings

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=3000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

START = 1_700_000_000.0  # a realistic epoch second, so that µs values are of production size

SMS = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
    Rule("5 per 59 minutes", by=("recipient", "content"), name="content-59m"),
)

GuardFactory = Callable[[Iterable[Policy]], Guard]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def _memory() -> Iterator[SyncBackend]:
    yield MemoryBackend()


BACKENDS: dict[str, Callable[[], Iterator[SyncBackend]]] = {"memory": _memory}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[SyncBackend]:
    yield from BACKENDS[request.param]()


@pytest.fixture
def make_guard(backend: SyncBackend, clock: ManualClock) -> GuardFactory:
    def make(policies: Iterable[Policy]) -> Guard:
        return Guard(backend, list(policies), clock=clock)

    return make
