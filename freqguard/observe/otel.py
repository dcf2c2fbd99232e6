"""The OpenTelemetry observer (the extra ``otel``).

Imported on first use of ``freqguard.observe.OpenTelemetryObserver``: code without metrics
never loads ``opentelemetry``. It needs only the API; the application installs and configures
the SDK (a ``MeterProvider`` with its readers and exporters), as OpenTelemetry wants of
libraries.

Names follow OpenTelemetry's conventions: dots, no ``_total`` (a counter is known to be one),
units in the instrument's ``unit`` rather than in its name, and a duration histogram named
``.duration`` in seconds. So ``freqguard.decisions``, ``freqguard.denials`` and
``freqguard.backend.errors`` become ``freqguard_decisions_total``, ``freqguard_denials_total``
and ``freqguard_backend_errors_total`` through OpenTelemetry's Prometheus exporter, the names
:class:`~freqguard.observe.PrometheusObserver` uses; the histogram is
``freqguard.decision.duration`` (``freqguard_decision_duration_seconds`` once exported there,
where the native observer says ``freqguard_decision_seconds``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from opentelemetry import metrics

from freqguard.observe.base import DECISION_BUCKETS
from freqguard.observe.tally import Tally, check_buckets

if TYPE_CHECKING:
    from freqguard.decision import Decision

__all__ = ["OpenTelemetryObserver"]


class OpenTelemetryObserver(Tally):
    """Count decisions, denials and store errors, and time decisions, as OpenTelemetry metrics.

    Counters ``freqguard.decisions`` (attributes ``policy``, ``outcome`` = ``allowed`` or
    ``denied``, ``source``), ``freqguard.denials`` (``policy``, ``rule``: one per denying rule,
    not for fail-closed answers), ``freqguard.backend.errors`` (``backend``, ``error``), and
    the histogram ``freqguard.decision.duration`` (``policy``; unit ``s``). No attribute ever
    holds a recipient, content or key.

    The counters are observable (asynchronous) ones: the observer keeps the cumulative counts
    and the SDK reads them when it collects, so a decision pays for one synchronous
    instrument only, the histogram.

    Args:
        meter: the meter to create the instruments on (default: the global meter provider's
            meter ``"freqguard"``; a no-op until the application sets a ``MeterProvider``).
        buckets: the histogram's advised bucket boundaries in seconds (a View the
            application configures wins over them).

    Raises:
        ConfigError: bad buckets.
    """

    def __init__(
        self,
        meter: metrics.Meter | None = None,
        *,
        buckets: Iterable[float] = DECISION_BUCKETS,
    ) -> None:
        bounds = check_buckets(buckets)
        if meter is None:
            from freqguard import __version__

            meter = metrics.get_meter("freqguard", __version__)
        super().__init__(())  # counts only: the histogram is the SDK's
        meter.create_observable_counter(
            "freqguard.decisions",
            [self._observe_decisions],
            unit="{decision}",
            description="Hits decided, by policy, outcome (allowed/denied) and source.",
        )
        meter.create_observable_counter(
            "freqguard.denials",
            [self._observe_denials],
            unit="{denial}",
            description="Denials by policy and by each rule that said no.",
        )
        meter.create_observable_counter(
            "freqguard.backend.errors",
            [self._observe_errors],
            unit="{error}",
            description="Store errors, by backend class and error class.",
        )
        self._duration = meter.create_histogram(
            "freqguard.decision.duration",
            unit="s",
            description="Seconds a hit took to decide, by policy.",
            explicit_bucket_boundaries_advisory=list(bounds),
        )
        self._policies: dict[str, Mapping[str, str]] = {}  # one attribute set per policy

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        """Count the decision, time it, and count each rule that denied it."""
        super().decided(decision, context, seconds)
        policy = decision.policy
        attributes = self._policies.get(policy)
        if attributes is None:
            attributes = self._policies[policy] = {"policy": policy}
        self._duration.record(seconds, attributes)

    def _observe_decisions(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        for (policy, allowed, source), cell in self.counts().decisions.items():
            outcome = "allowed" if allowed else "denied"
            attributes = {"policy": policy, "outcome": outcome, "source": source}
            yield metrics.Observation(int(cell[0]), attributes)

    def _observe_denials(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        for (policy, rule), count in self.counts().denials.items():
            yield metrics.Observation(count, {"policy": policy, "rule": rule})

    def _observe_errors(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        for (backend, error), count in self.counts().errors.items():
            yield metrics.Observation(count, {"backend": backend, "error": error})
