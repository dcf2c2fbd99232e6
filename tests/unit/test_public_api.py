"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

from pathlib import Path

import freqguard

PUBLIC = {
    "AsyncGuard",
    "AsyncRedisBackend",
    "BackendUnavailable",
    "CapExceeded",
    "Clock",
    "ConfigError",
    "ContextError",
    "Decision",
    "FreqGuardError",
    "Guard",
    "LoggingObserver",
    "ManualClock",
    "MemoryBackend",
    "Observer",
    "OpenTelemetryObserver",
    "PartialFailure",
    "Policy",
    "PrometheusObserver",
    "QuietHours",
    "Rate",
    "RedisBackend",
    "Rule",
    "RuleState",
    "Strategy",
    "SystemClock",
    "TierRates",
    "async_backend_from_url",
    "backend_from_url",
    "capped",
    "configure",
    "parse_rate",
    "parse_rates",
}


def test_exported_names_are_pinned() -> None:
    assert set(freqguard.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(freqguard, name).__module__.startswith("freqguard.")


def test_the_decorator_is_importable_from_the_top() -> None:
    """``from freqguard import capped, configure``, the same objects as in
    ``freqguard.decorators``."""
    from freqguard import capped, configure, decorators

    assert capped is decorators.capped
    assert configure is decorators.configure


def test_the_observers_are_importable_from_the_top() -> None:
    from freqguard import (
        LoggingObserver,
        Observer,
        OpenTelemetryObserver,
        PrometheusObserver,
        observe,
    )

    assert LoggingObserver is observe.LoggingObserver
    assert Observer is observe.Observer
    assert PrometheusObserver is observe.PrometheusObserver
    assert OpenTelemetryObserver is observe.OpenTelemetryObserver


def test_every_exported_name_is_documented() -> None:
    for name in PUBLIC:
        assert getattr(freqguard, name).__doc__, name


def test_strategy_values_are_the_documented_strings() -> None:
    """The words users write are the registry's (``Strategy``), and each is documented: a
    page under docs/strategies/ named by it, linked from the strategies' table, and no page
    for a word that is not one."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    words = [s.value for s in freqguard.Strategy]
    assert sorted(page.stem for page in (docs / "strategies").glob("*.md")) == sorted(words)
    table = (docs / "strategies.md").read_text(encoding="utf-8")
    for word in words:
        assert f"| `{word}`" in table, word
        assert f"(strategies/{word}.md)" in table, word


def test_the_guards_operations_are_pinned() -> None:
    """Both guards offer the same operations, under the same names and parameters."""
    import inspect

    from freqguard import AsyncGuard, Guard

    operations = {
        "hit": "(policy, cost=1, **ctx)",
        "peek": "(policy, cost=1, **ctx)",
        "hit_many": "(policy, contexts, cost=1)",
        "acquire": "(policy, *, timeout=None, cost=1, **ctx)",
        "refund": "(policy, cost=None, **ctx)",
        "reset": "(policy, *, rules=None, **ctx)",
        "set_limit": "(policy, rule, rate, *, ttl=None, **ctx)",
        "clear_limit": "(policy, rule, **ctx)",
        "limits_for": "(policy, **ctx)",
        "lease": "(policy, cost=1, **ctx)",
        "take_lease": "(policy, cost=1, **ctx)",
        "release": "(decision, /)",
    }
    for kind in (Guard, AsyncGuard):
        for name, wanted in operations.items():
            signature = inspect.signature(getattr(kind, name))
            plain = signature.replace(
                parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                return_annotation=inspect.Signature.empty,
            )
            assert str(plain).replace("self, ", "") == wanted, (kind.__name__, name)
