"""The Prometheus observer (the extra ``prometheus``).

Imported on first use of ``freqguard.observe.PrometheusObserver``: code without metrics never
loads ``prometheus_client``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from freqguard.errors import ConfigError
from freqguard.observe.base import DECISION_BUCKETS, error_label
from freqguard.observe.tally import Counts, Tally, check_buckets

if TYPE_CHECKING:
    from freqguard.decision import Decision
    from freqguard.errors import BackendUnavailable

__all__ = ["PrometheusObserver"]

_DECISIONS = ("freqguard_decisions", "Hits decided, by policy, outcome and source.")
_DENIALS = ("freqguard_denials", "Denials by policy and by each rule that said no.")
_ERRORS = ("freqguard_backend_errors", "Store errors, by backend class and error class.")
_SECONDS = ("freqguard_decision_seconds", "Seconds a hit took to decide, by policy.")


def _multiprocess() -> bool:
    """prometheus_client's multiprocess mode (gunicorn and the like) is on: the variables
    it reads when imported."""
    legacy = os.environ.get("prometheus_multiproc_dir")  # noqa: SIM112 - its old spelling
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or legacy)


class PrometheusObserver(Tally):
    """Count decisions, denials and store errors, and time decisions, in Prometheus metrics.

    ``freqguard_decisions_total{policy,outcome,source}`` (outcome ``allowed``/``denied``),
    ``freqguard_denials_total{policy,rule}`` (one per denying rule, ``rule`` its id; not
    for fail-closed answers, which no rule gave), ``freqguard_backend_errors_total{backend,
    error}`` and the histogram ``freqguard_decision_seconds{policy}``. No label ever holds a
    recipient, content or key. A series appears with its first count.

    The counts are kept by the observer and read by the registry when scraped (a custom
    collector): a decision costs one lock, not one per metric and bucket. Under
    prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set), where only its
    own metric types are shared between processes, the observer uses those instead.

    One observer per registry: share it between guards (the metrics are registered once).

    Args:
        registry: where the metrics are registered (default: ``prometheus_client.REGISTRY``).
        buckets: the histogram's upper bounds in seconds (default: 50 µs to 2.5 s, for
            decisions in memory and on Redis alike).

    Raises:
        ConfigError: the registry already holds these metrics (another observer on it), or
            bad buckets.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> PrometheusObserver:
        if cls is PrometheusObserver and _multiprocess():
            cls = _SharedPrometheusObserver
        return super().__new__(cls)

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        buckets: Iterable[float] = DECISION_BUCKETS,
    ) -> None:
        super().__init__(check_buckets(buckets))
        self._collector = _Collector(self)
        _register(REGISTRY if registry is None else registry, [self._collector])


def _register(registry: CollectorRegistry, collectors: list[Any]) -> None:
    done: list[Any] = []
    try:
        for collector in collectors:
            registry.register(collector)
            done.append(collector)
    except ValueError as exc:  # "Duplicated timeseries in CollectorRegistry"
        for collector in done:  # leave the registry as it was
            registry.unregister(collector)
        raise ConfigError(
            "this registry already holds freqguard's metrics: share one "
            "PrometheusObserver between guards, or give each its own CollectorRegistry"
        ) from exc


class _Collector(Collector):
    """The tally's counts as Prometheus metric families, read at each scrape."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def describe(self) -> Iterator[Metric]:
        """The families without samples: the registry checks their names at registration."""
        return iter(_families(Counts({}, {}, {}), self._tally.bounds))

    def collect(self) -> Iterator[Metric]:
        return iter(_families(self._tally.counts(), self._tally.bounds))


def _families(counts: Counts, bounds: tuple[float, ...]) -> list[Metric]:
    decisions = CounterMetricFamily(*_DECISIONS, labels=("policy", "outcome", "source"))
    seconds = HistogramMetricFamily(*_SECONDS, labels=("policy",))
    per_policy: dict[str, list[float]] = {}
    for (policy, allowed, source), cell in sorted(counts.decisions.items()):
        decisions.add_metric([policy, "allowed" if allowed else "denied", source], cell[0])
        total = per_policy.setdefault(policy, [0.0] * len(cell))
        for i, value in enumerate(cell):
            total[i] += value
    # le as prometheus_client's own histograms write it, so that queries fit either
    les = [str(floatToGoString(bound)) for bound in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
    for policy, (_, summed, *per_bucket) in per_policy.items():
        cumulative, running = [], 0.0
        for le, count in zip(les, per_bucket, strict=True):
            running += count
            cumulative.append((le, running))
        seconds.add_metric([policy], cumulative, summed)
    denials = CounterMetricFamily(*_DENIALS, labels=("policy", "rule"))
    for (policy, rule), count in sorted(counts.denials.items()):
        denials.add_metric([policy, rule], count)
    errors = CounterMetricFamily(*_ERRORS, labels=("backend", "error"))
    for (backend, error), count in sorted(counts.errors.items()):
        errors.add_metric([backend, error], count)
    return [decisions, denials, errors, seconds]


class _SharedPrometheusObserver(PrometheusObserver):
    """The observer on prometheus_client's own metric types, for its multiprocess mode
    (their values live in files every process writes and the scraping one sums up)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        buckets: Iterable[float] = DECISION_BUCKETS,
    ) -> None:
        kwargs: dict[str, Any] = {"registry": None}
        self.decisions = Counter(*_DECISIONS, ("policy", "outcome", "source"), **kwargs)
        self.denials = Counter(*_DENIALS, ("policy", "rule"), **kwargs)
        self.backend_errors = Counter(*_ERRORS, ("backend", "error"), **kwargs)
        self.decision_seconds = Histogram(
            *_SECONDS, ("policy",), buckets=check_buckets(buckets), **kwargs
        )
        metrics = [self.decisions, self.denials, self.backend_errors, self.decision_seconds]
        _register(REGISTRY if registry is None else registry, metrics)
        # the labelled children, made once per label set (.labels() costs more than .inc())
        self._decided: dict[tuple[str, bool, str], tuple[Any, Any]] = {}
        self._denied: dict[tuple[str, str], Any] = {}
        self._failed: dict[tuple[str, str], Any] = {}

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        policy, allowed = decision.policy, decision.allowed
        key = (policy, allowed, decision.source)
        children = self._decided.get(key)
        if children is None:
            children = self._decided[key] = (
                self.decisions.labels(policy, "allowed" if allowed else "denied", key[2]),
                self.decision_seconds.labels(policy),
            )
        children[0].inc()
        children[1].observe(seconds)
        if not allowed and key[2] != "fail-closed":  # no rule said no: the store was away
            for rule in decision.denied_by:
                denied = self._denied.get((policy, rule.id))
                if denied is None:
                    denied = self._denied[policy, rule.id] = self.denials.labels(policy, rule.id)
                denied.inc()

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        key = (backend, error_label(error))
        child = self._failed.get(key)
        if child is None:
            child = self._failed[key] = self.backend_errors.labels(*key)
        child.inc()
