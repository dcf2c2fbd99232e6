"""The decision service (``freqguard serve CONFIG``): a configuration's policies behind
HTTP/JSON, for callers in any language. See :mod:`freqguard.service.app` for the API."""

from __future__ import annotations

import os
from typing import Any

from freqguard.service.app import MAX_BATCH, MAX_BODY, create_app, decision_json

__all__ = [
    "CONFIG_ENV",
    "MAX_BATCH",
    "MAX_BODY",
    "TOKENS_ENV",
    "create_app",
    "decision_json",
    "from_env",
]

#: The configuration file a worker process serves (``freqguard serve`` sets it).
CONFIG_ENV = "FREQGUARD_SERVE_CONFIG"
#: Bearer tokens, one per line or comma-separated; or ``FREQGUARD_TOKENS_FILE``, a file.
TOKENS_ENV = "FREQGUARD_TOKENS"


def tokens_from_env() -> list[str]:
    """The tokens the environment gives (never logged)."""
    found = os.environ.get(TOKENS_ENV, "")
    path = os.environ.get(f"{TOKENS_ENV}_FILE")
    if path:
        with open(path, encoding="utf-8") as file:
            found += "\n" + file.read()
    return [t.strip() for t in found.replace(",", "\n").splitlines() if t.strip()]


def from_env() -> Any:
    """The app of the configuration :data:`CONFIG_ENV` names: uvicorn's factory, one per
    worker process."""
    from freqguard.config import load

    config = load(os.environ[CONFIG_ENV])
    registry = None
    try:
        import prometheus_client

        from freqguard.observe.prometheus import PrometheusObserver

        registry = prometheus_client.CollectorRegistry()
        observers: list[Any] = [PrometheusObserver(registry=registry)]
    except ImportError:  # the prometheus extra is not installed: no /metrics
        observers = []
    return create_app(config.async_guard(observers=observers), tokens_from_env(), registry)
