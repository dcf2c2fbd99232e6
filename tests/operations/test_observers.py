"""Observers: the Prometheus metrics a real guard produces, every shipped observer an
Observer, and an acquire that times out told as a denial. The OpenTelemetry metrics and the
logs are in ``test_observers_otel.py`` and ``test_observers_logging.py``.

A real Guard on MemoryBackend with a pinned clock; store failures come from a thin wrapper
that raises BackendUnavailable from a ConnectionError, as the Redis backends do
(``observer_rig.py``); one test shows the same labels on Redis.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    backend_from_url,
)
from freqguard.backends.redis import RedisBackend
from freqguard.observe import (
    DECISION_BUCKETS,
    LoggingObserver,
    Observer,
    OpenTelemetryObserver,
    PrometheusObserver,
)
from tests.conftest import in_threads
from tests.operations.observer_rig import LOGIN, RECIPIENT, SMS, Outage, traffic
from tests.servers import free_port


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# -- Prometheus ----------------------------------------------------------------------------


def test_prometheus_counts_decisions_by_policy_outcome_and_source(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    guard = traffic(clock, PrometheusObserver(registry))
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="sms", outcome="allowed", source="backend") == 3
    assert count(registry, total, policy="sms", outcome="denied", source="backend") == 3
    assert count(registry, total, policy="sms", outcome="denied", source="deny-cache") == 2
    assert count(registry, total, policy="login", outcome="allowed", source="backend") == 1
    assert count(registry, total, policy="login", outcome="denied", source="backend") == 1
    # peeks, refunds and resets are not decisions
    guard.peek("sms", recipient=RECIPIENT, content="code 1")
    guard.reset("login", user="ann")
    assert sum(s.value for m in registry.collect() for s in m.samples if s.name == total) == 10


def test_prometheus_counts_each_denying_rule(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    traffic(clock, PrometheusObserver(registry))
    rcpt, content = (rule.id for rule in SMS.rules)
    denials = "freqguard_denials_total"
    # each rule that said no, in the store's denials and the deny cache's alike
    assert count(registry, denials, policy="sms", rule=rcpt) == 5
    assert count(registry, denials, policy="sms", rule=content) == 4
    assert count(registry, denials, policy="login", rule=LOGIN.rules[0].id) == 1


def test_prometheus_times_every_decision_per_policy(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    traffic(clock, PrometheusObserver(registry))
    seconds = "freqguard_decision_seconds"
    assert count(registry, f"{seconds}_count", policy="sms") == 8
    assert count(registry, f"{seconds}_count", policy="login") == 2
    assert count(registry, f"{seconds}_bucket", policy="sms", le="+Inf") == 8
    assert 0 < count(registry, f"{seconds}_sum", policy="sms") < 8 * 2.5
    bounds = [
        float(s.labels["le"])
        for m in registry.collect()
        if m.name == seconds
        for s in m.samples
        if s.name == f"{seconds}_bucket" and s.labels["policy"] == "login"
    ]
    assert bounds == [*DECISION_BUCKETS, float("inf")]


def test_prometheus_buckets_can_be_chosen(registry: CollectorRegistry) -> None:
    guard = Guard(
        MemoryBackend(), [LOGIN], observers=[PrometheusObserver(registry, buckets=(0.5, 1))]
    )
    guard.hit("login", user="ann")
    seconds = "freqguard_decision_seconds_bucket"
    assert count(registry, seconds, policy="login", le="0.5") == 1
    assert count(registry, seconds, policy="login", le="1.0") == 1


def test_prometheus_exposition_parses_and_is_cumulative(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    traffic(clock, PrometheusObserver(registry))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert {"freqguard_decisions", "freqguard_denials", "freqguard_decision_seconds"} <= set(
        families
    )
    assert families["freqguard_decisions"].type == "counter"
    assert families["freqguard_decision_seconds"].type == "histogram"
    buckets = [
        s.value
        for s in families["freqguard_decision_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["policy"] == "sms"
    ]
    assert buckets == sorted(buckets)
    assert buckets[-1] == 8  # every sms decision, the deny cache's 2 among them


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.5, 0.5), (0.0, 1.0), (1.0, float("inf"))])
def test_bad_buckets_are_refused(registry: CollectorRegistry, buckets: tuple[float, ...]) -> None:
    with pytest.raises(ConfigError, match="buckets must be increasing"):
        PrometheusObserver(registry, buckets=buckets)
    with pytest.raises(ConfigError, match="buckets must be increasing"):
        OpenTelemetryObserver(buckets=buckets)


def test_prometheus_multiprocess_mode_sums_the_workers(tmp_path: Path) -> None:
    """Under prometheus_client's multiprocess mode (gunicorn workers) the counts of every
    process reach the one that serves /metrics."""
    worker = (
        "from prometheus_client import CollectorRegistry\n"
        "from freqguard import Guard, MemoryBackend, Policy, Rule\n"
        "from freqguard.observe import PrometheusObserver\n"
        "observer = PrometheusObserver(CollectorRegistry())\n"
        "login = Policy('login', Rule('1/minute', by='user', name='user-1m'))\n"
        "guard = Guard(MemoryBackend(), [login], observers=[observer])\n"
        "guard.hit('login', user='ann')\n"
        "guard.hit('login', user='ann')\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", worker], env=env, check=True)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))  # type: ignore[no-untyped-call]
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="login", outcome="allowed", source="backend") == 2
    assert count(registry, total, policy="login", outcome="denied", source="backend") == 2
    assert count(registry, "freqguard_denials_total", policy="login", rule="user-1m") == 2
    assert count(registry, "freqguard_decision_seconds_count", policy="login") == 4


@pytest.mark.usefixtures("fast_switching")
def test_counts_are_exact_under_threads(registry: CollectorRegistry, clock: ManualClock) -> None:
    """Threads deciding at once lose no count. (CPython 3.11 switches threads only at calls
    and jumps, so this passes without the tally's lock too; the lock is for interpreters
    that switch anywhere, free-threaded ones.)"""
    wide = Policy("wide", Rule("10000/minute", by="user"))
    guard = Guard(MemoryBackend(), [wide], clock=clock, observers=[PrometheusObserver(registry)])

    def worker(n: int) -> None:
        for i in range(500):
            guard.hit("wide", user=f"{n}-{i % 7}")

    in_threads(worker, 8)
    labels = {"policy": "wide", "outcome": "allowed", "source": "backend"}
    assert count(registry, "freqguard_decisions_total", **labels) == 4000
    assert count(registry, "freqguard_decision_seconds_count", policy="wide") == 4000


def test_prometheus_counts_store_errors_and_fail_open_answers(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    backend = Outage()
    guard = Guard(
        backend,
        [SMS],
        clock=clock,
        on_error="allow",
        breaker=None,
        observers=[PrometheusObserver(registry)],
    )
    assert guard.hit("sms", recipient=RECIPIENT, content="c").source == "backend"
    backend.down = True
    for _ in range(3):
        assert guard.hit("sms", recipient=RECIPIENT, content="c").source == "fail-open"
    errors = "freqguard_backend_errors_total"
    assert count(registry, errors, backend="Outage", error="ConnectionError") == 3
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="sms", outcome="allowed", source="fail-open") == 3
    assert count(registry, total, policy="sms", outcome="allowed", source="backend") == 1


def test_prometheus_fail_closed_answers_name_no_rule(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    """Failing closed denies by every rule, but no rule said no: it is counted as a
    fail-closed decision, not as a denial by each rule."""
    backend = Outage()
    backend.down = True
    observer = PrometheusObserver(registry)
    guard = Guard(backend, [SMS], clock=clock, on_error="deny", observers=[observer])
    decision = guard.hit("sms", recipient=RECIPIENT, content="c")
    assert decision.source == "fail-closed"
    assert decision.denied_by
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="sms", outcome="denied", source="fail-closed") == 1
    assert not [
        s for m in registry.collect() for s in m.samples if s.name.startswith("freqguard_denials")
    ]


def test_prometheus_counts_fallback_decisions(
    registry: CollectorRegistry, clock: ManualClock
) -> None:
    backend = Outage()
    backend.down = True
    guard = Guard(
        backend,
        [LOGIN],
        clock=clock,
        on_error=MemoryBackend(),
        breaker=None,
        observers=[PrometheusObserver(registry)],
    )
    assert guard.hit("login", user="ann").source == "fallback"
    assert not guard.hit("login", user="ann").allowed
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="login", outcome="allowed", source="fallback") == 1
    assert count(registry, total, policy="login", outcome="denied", source="fallback") == 1
    assert count(registry, "freqguard_denials_total", policy="login", rule="user-1m") == 1
    assert (
        count(registry, "freqguard_backend_errors_total", backend="Outage", error="ConnectionError")
        == 2
    )


def test_prometheus_on_redis_labels_the_backend_and_the_driver_error(
    redis_backend: RedisBackend, registry: CollectorRegistry, clock: ManualClock
) -> None:
    observer = PrometheusObserver(registry)
    guard = Guard(redis_backend, [LOGIN], clock=clock, observers=[observer])
    assert guard.hit("login", user="ann").allowed
    assert not guard.hit("login", user="ann").allowed
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="login", outcome="allowed", source="backend") == 1
    assert count(registry, total, policy="login", outcome="denied", source="backend") == 1
    # a port nobody listens on: refused at once, no timeout
    nowhere = backend_from_url(f"redis://127.0.0.1:{free_port()}")
    with Guard(nowhere, [LOGIN], clock=clock, on_error="allow", observers=[observer]) as away:
        assert away.hit("login", user="bob").source == "fail-open"
    errors = "freqguard_backend_errors_total"
    assert count(registry, errors, backend="RedisBackend", error="ConnectionError") == 1
    labels = {
        name: value
        for m in registry.collect()
        for s in m.samples
        for name, value in s.labels.items()
    }
    assert "ann" not in labels.values()
    assert "bob" not in labels.values()


def test_one_prometheus_observer_per_registry(registry: CollectorRegistry) -> None:
    PrometheusObserver(registry)
    with pytest.raises(ConfigError, match="share one PrometheusObserver"):
        PrometheusObserver(registry)
    # the failed second observer registered nothing: the first one's metrics stand alone
    names = [m.name for m in registry.collect()]
    assert sorted(names) == sorted(set(names))


def test_prometheus_uses_the_default_registry_when_given_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """prometheus_client's REGISTRY, as the module finds it when the observer is made; a
    fresh one here, since another test of this process may hold freqguard's metrics in
    the real one (the process-wide observers of a configuration: seen failing by order)."""
    default = CollectorRegistry()
    monkeypatch.setattr(sys.modules["freqguard.observe.prometheus"], "REGISTRY", default)
    observer = PrometheusObserver()
    Guard(MemoryBackend(), [LOGIN], observers=[observer]).hit("login", user="ann")
    labels = {"policy": "login", "outcome": "allowed", "source": "backend"}
    assert default.get_sample_value("freqguard_decisions_total", labels) == 1


def test_async_guards_report_alike(registry: CollectorRegistry, clock: ManualClock) -> None:
    async def main() -> None:
        guard = AsyncGuard(
            MemoryBackend(), [LOGIN], clock=clock, observers=[PrometheusObserver(registry)]
        )
        assert (await guard.hit("login", user="ann")).allowed
        assert not (await guard.hit_many("login", [{"user": "ann"}]))[0].allowed

    asyncio.run(main())
    total = "freqguard_decisions_total"
    assert count(registry, total, policy="login", outcome="allowed", source="backend") == 1
    assert count(registry, total, policy="login", outcome="denied", source="backend") == 1


# -- every observer ------------------------------------------------------------------------


def test_every_shipped_observer_is_an_observer(registry: CollectorRegistry) -> None:
    for observer in (LoggingObserver(), PrometheusObserver(registry), OpenTelemetryObserver()):
        assert isinstance(observer, Observer)


def test_an_acquire_that_times_out_is_told_as_a_denial(clock: ManualClock) -> None:
    """acquire raising CapExceeded was a denial no observer heard of: the denials metric
    missed every worker that gave up waiting."""
    heard: list[tuple[str, bool]] = []

    class Listener:
        def decided(self, decision: Any, context: Any, seconds: float) -> None:
            heard.append((decision.policy, decision.allowed))

        def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
            raise AssertionError(error)

    guard = Guard(MemoryBackend(), [LOGIN], clock=clock, observers=[Listener()])
    assert guard.acquire("login", user="ann").allowed
    with pytest.raises(CapExceeded):
        guard.acquire("login", user="ann", timeout=0)
    assert heard == [("login", True), ("login", False)]
