"""Observers: told of every decision and every store error, for logs and metrics.

A guard made with ``observers=[...]`` calls each observer's :meth:`Observer.decided` after
every hit (``hit``, each decision of ``hit_many``, the decision ``acquire`` returns) and
:meth:`Observer.failed` for every store error, before ``on_error`` answers. Peeks, refunds
and resets are not decisions and are not reported. Without observers a hit pays nothing.

Shipped: :class:`LoggingObserver`; :class:`PrometheusObserver` (extra ``prometheus``) with
``freqguard_decisions_total{policy,outcome,source}``, ``freqguard_denials_total{policy,rule}``,
``freqguard_backend_errors_total{backend,error}`` and ``freqguard_decision_seconds{policy}``;
:class:`OpenTelemetryObserver` (extra ``otel``) with the same metrics in OpenTelemetry's
spelling: ``freqguard.decisions``, ``freqguard.denials``, ``freqguard.backend.errors`` and
``freqguard.decision.duration`` (docs/observability.md says why). The two metrics
observers are imported on first use, so this module loads neither library.
Never a recipient, content or key as a label; logs name a context only by its digest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from freqguard.observe.base import (
    DECISION_BUCKETS,
    LoggingObserver,
    Observer,
    backend_label,
    error_label,
)

if TYPE_CHECKING:
    from freqguard.observe.otel import OpenTelemetryObserver
    from freqguard.observe.prometheus import PrometheusObserver

__all__ = [
    "DECISION_BUCKETS",
    "LoggingObserver",
    "Observer",
    "OpenTelemetryObserver",
    "PrometheusObserver",
    "backend_label",
    "error_label",
]


def __getattr__(name: str) -> Any:
    # Each metrics observer needs its extra (prometheus_client, opentelemetry-api): load it
    # on first use, so that importing this package (as every guard does) loads neither.
    if name == "PrometheusObserver":
        from freqguard.observe.prometheus import PrometheusObserver

        return PrometheusObserver
    if name == "OpenTelemetryObserver":
        from freqguard.observe.otel import OpenTelemetryObserver

        return OpenTelemetryObserver
    raise AttributeError(f"module 'freqguard.observe' has no attribute {name!r}")
