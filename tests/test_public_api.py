"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import freqguard

PUBLIC = {
    "AsyncGuard",
    "AsyncRedisBackend",
    "BackendUnavailable",
    "CapExceeded",
    "Clock",
    "ConfigError",
    "Decision",
    "FreqGuardError",
    "Guard",
    "ManualClock",
    "MemoryBackend",
    "Policy",
    "Rate",
    "RedisBackend",
    "Rule",
    "RuleState",
    "Strategy",
    "SystemClock",
    "async_backend_from_url",
    "backend_from_url",
    "parse_rate",
    "parse_rates",
}


def test_exported_names_are_pinned() -> None:
    assert set(freqguard.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(freqguard, name).__module__.startswith("freqguard.")


def test_every_exported_name_is_documented() -> None:
    for name in PUBLIC:
        assert getattr(freqguard, name).__doc__, name


def test_strategy_values_are_the_documented_strings() -> None:
    assert [s.value for s in freqguard.Strategy] == [
        "fixed-window",
        "sliding-log",
        "token-bucket",
        "gcra",
    ]
