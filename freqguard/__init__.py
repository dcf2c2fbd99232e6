"""freqguard: frequency capping and rate limiting, exact and atomic per message."""

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from freqguard.backends.memory import MemoryBackend
from freqguard.backends.urls import async_backend_from_url, backend_from_url
from freqguard.clock import Clock, ManualClock, SystemClock
from freqguard.decision import Decision, RuleState
from freqguard.errors import (
    BackendUnavailable,
    CapExceeded,
    ConfigError,
    ContextError,
    FreqGuardError,
    PartialFailure,
)
from freqguard.guard import AsyncGuard, Guard
from freqguard.observe import LoggingObserver, Observer
from freqguard.policy import Policy, QuietHours
from freqguard.rates import Rate, parse_rate, parse_rates
from freqguard.rules import Rule, Strategy, TierRates

if TYPE_CHECKING:
    from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
    from freqguard.decorators import capped
    from freqguard.decorators.defaults import configure
    from freqguard.observe.otel import OpenTelemetryObserver
    from freqguard.observe.prometheus import PrometheusObserver

__version__ = "0.3.1.dev0"

__all__ = [
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
]
# `from freqguard import *` imports every name listed: those that need an extra only when it
# is installed (each is still importable by name, with the extra's error if it is not)
_EXTRAS = {
    "RedisBackend": "redis",
    "AsyncRedisBackend": "redis",
    "PrometheusObserver": "prometheus_client",
    "OpenTelemetryObserver": "opentelemetry",
}
__all__ = [name for name in __all__ if name not in _EXTRAS or find_spec(_EXTRAS[name])]


def __getattr__(name: str) -> Any:
    # The Redis backends import redis-py, an optional extra: load them on first use.
    if name in ("RedisBackend", "AsyncRedisBackend"):
        from freqguard.backends import redis

        return getattr(redis, name)
    # The decorator module adds ~5 ms (a twentieth of the package's import) that code
    # without @capped need not pay. `configure` sets @capped's default guard: it too is
    # loaded on first use, from its own module (freqguard.decorators.defaults, which is light).
    if name == "capped":
        from freqguard.decorators import capped

        return capped
    if name == "configure":
        from freqguard.decorators.defaults import configure

        return configure
    # Each metrics observer needs its extra (prometheus_client, opentelemetry-api).
    if name in ("PrometheusObserver", "OpenTelemetryObserver"):
        from freqguard import observe

        return getattr(observe, name)
    raise AttributeError(f"module 'freqguard' has no attribute {name!r}")
