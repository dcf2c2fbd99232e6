"""The decision service (``freqguard serve CONFIG``): a configuration's policies behind
HTTP/JSON (:mod:`freqguard.service.app`). ``serve`` reads the tokens once as it starts
(:func:`tokens_from_env`) and prints :func:`startup_warnings`; each worker then makes its
app with :func:`from_env`.
"""

from __future__ import annotations

import os
from typing import Any

from freqguard.errors import ConfigError
from freqguard.service.access import ACCESS_LOG_ENV, AccessLog, install_handler
from freqguard.service.app import MAX_BATCH, MAX_BODY, create_app
from freqguard.service.gate import (
    HOSTS_ENV,
    TOKENS_ENV,
    hosts_from_env,
    parse_tokens,
    served_names,
    startup_warnings,
    tokens_from_env,
)

__all__ = [
    "ACCESS_LOG_ENV",
    "CONFIG_ENV",
    "HISTORY_ENV",
    "HOSTS_ENV",
    "MAX_BATCH",
    "MAX_BODY",
    "TOKENS_ENV",
    "create_app",
    "from_env",
    "history_from_env",
    "parse_tokens",
    "served_names",
    "startup_warnings",
    "tokens_from_env",
]

#: The configuration file a worker process serves (``freqguard serve`` sets it).
CONFIG_ENV = "FREQGUARD_SERVE_CONFIG"
#: ``off``: keep no decisions' history (``freqguard serve --history off``); ``on``, the
#: default, keeps it.
HISTORY_ENV = "FREQGUARD_SERVE_HISTORY"


def history_from_env() -> bool:
    """Whether :data:`HISTORY_ENV` asks for the history (unset: yes).

    Raises:
        ConfigError: a value other than ``on`` or ``off``.
    """
    value = os.environ.get(HISTORY_ENV, "on")
    if value not in ("on", "off"):
        raise ConfigError(f"{HISTORY_ENV} is on or off, got {value[:40]!r}")
    return value == "on"


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
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # serve --workers N: every worker's
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = prometheus_client.CollectorRegistry()  # what /metrics answers: the sum
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    except ImportError:  # the prometheus extra is not installed: no /metrics
        observers = []
    guard = config.async_guard(observers=observers)
    app = create_app(guard, tokens_from_env(), registry, hosts_from_env(), history_from_env())
    key = os.environ.get(ACCESS_LOG_ENV)
    if key:  # --access-log json: the key of the digests, the same in every worker
        install_handler()
        app = AccessLog(app, key.encode())
    return app
