"""The OpenTelemetry observer: the metrics Prometheus gets for a day of traffic, store
errors counted, and the global provider's meter (no SDK: a no-op) when given none. A real
Guard on MemoryBackend with a pinned clock; the rig is ``observer_rig.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.observe import DECISION_BUCKETS, OpenTelemetryObserver
from tests.operations.observer_rig import LOGIN, RECIPIENT, SMS, Outage, traffic


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def otel_points(reader: InMemoryMetricReader) -> dict[tuple[str, frozenset[Any]], Any]:
    """Each data point by (instrument name, attributes): a counter's value, a histogram's
    point."""
    points: dict[tuple[str, frozenset[Any]], Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, frozenset(dict(point.attributes or {}).items()))
                    points[key] = getattr(point, "value", point)
    return points


def otel_count(reader: InMemoryMetricReader, name: str, **attributes: str) -> Any:
    return otel_points(reader).get((name, frozenset(attributes.items())), 0)


def test_opentelemetry_records_the_same_metrics(
    reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    traffic(clock, OpenTelemetryObserver(MeterProvider(metric_readers=[reader]).get_meter("t")))
    total = "freqguard.decisions"
    assert otel_count(reader, total, policy="sms", outcome="allowed", source="backend") == 3
    assert otel_count(reader, total, policy="sms", outcome="denied", source="backend") == 3
    assert otel_count(reader, total, policy="sms", outcome="denied", source="deny-cache") == 2
    assert otel_count(reader, total, policy="login", outcome="denied", source="backend") == 1
    rcpt, content = (rule.id for rule in SMS.rules)
    assert otel_count(reader, "freqguard.denials", policy="sms", rule=rcpt) == 5
    assert otel_count(reader, "freqguard.denials", policy="sms", rule=content) == 4
    duration = otel_count(reader, "freqguard.decision.duration", policy="sms")
    assert duration.count == 8
    assert tuple(duration.explicit_bounds) == DECISION_BUCKETS


def test_opentelemetry_counts_store_errors(
    reader: InMemoryMetricReader, clock: ManualClock
) -> None:
    backend = Outage()
    observer = OpenTelemetryObserver(MeterProvider(metric_readers=[reader]).get_meter("t"))
    guard = Guard(backend, [SMS], clock=clock, on_error="deny", breaker=None, observers=[observer])
    backend.down = True
    for _ in range(2):
        assert guard.hit("sms", recipient=RECIPIENT, content="c").source == "fail-closed"
    errors = "freqguard.backend.errors"
    assert otel_count(reader, errors, backend="Outage", error="ConnectionError") == 2
    total = "freqguard.decisions"
    assert otel_count(reader, total, policy="sms", outcome="denied", source="fail-closed") == 2
    assert not [key for key in otel_points(reader) if key[0] == "freqguard.denials"]


def test_opentelemetry_without_a_meter_uses_the_global_provider(clock: ManualClock) -> None:
    """No SDK configured: the API's no-op meter; the guard works and records nothing."""
    guard = Guard(MemoryBackend(), [LOGIN], clock=clock, observers=[OpenTelemetryObserver()])
    assert guard.hit("login", user="ann").allowed
