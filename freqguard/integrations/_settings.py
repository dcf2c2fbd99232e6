"""What the framework integrations configured by ``FREQGUARD_*`` settings (Flask's
``app.config``, Django's settings) read alike: an unknown setting's error, naming the one
meant, and the configuration file ``FREQGUARD_CONFIG`` names."""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from typing import Any

from freqguard.backends.urls import parse_url
from freqguard.config import Config, load
from freqguard.errors import ConfigError, shown

__all__ = [
    "COMMON",
    "GUARDS",
    "MEANT",
    "backend_url",
    "configured",
    "peer_setting",
    "unknown_setting",
]

#: The settings every integration reads (Django adds FREQGUARD_KEY).
COMMON = frozenset(
    {
        "FREQGUARD_BACKEND",
        "FREQGUARD_CONFIG",
        "FREQGUARD_DEFAULT_LIMITS",
        "FREQGUARD_HEADERS",
        "FREQGUARD_ENABLED",
    }
)
#: What people type for them, from the peers' names (each integration adds its peer's own
#: ``RATELIMIT_*`` names, which it warns of).
MEANT = {
    "FREQGUARD_DEFAULT_LIMIT": "FREQGUARD_DEFAULT_LIMITS",
    "FREQGUARD_DEFAULT": "FREQGUARD_DEFAULT_LIMITS",
    "FREQGUARD_STORAGE_URI": "FREQGUARD_BACKEND",
    "FREQGUARD_STORAGE_URL": "FREQGUARD_BACKEND",
    "FREQGUARD_URL": "FREQGUARD_BACKEND",
    "FREQGUARD_CACHE": "FREQGUARD_BACKEND",
    "FREQGUARD_HEADERS_ENABLED": "FREQGUARD_HEADERS",
    "FREQGUARD_ENABLE": "FREQGUARD_ENABLED",
}


#: Settings people type for the guard's own arguments, and the argument.
GUARDS = {
    "FREQGUARD_ON_ERROR": "on_error",
    "FREQGUARD_FAIL_OPEN": "on_error",
    "FREQGUARD_SWALLOW_ERRORS": "on_error",
    "FREQGUARD_PREFIX": "prefix",
    "FREQGUARD_KEY_PREFIX": "prefix",
    "FREQGUARD_BREAKER": "breaker",
    "FREQGUARD_OBSERVERS": "observers",
}


def backend_url(value: object, also: str = "") -> str:
    """``FREQGUARD_BACKEND``'s URL, checked (no I/O: the guard is made from it later).

    Raises:
        ConfigError: not a string, or not a backend URL, naming the setting (``also``:
            what else it may be, said in the first case).
    """
    if not isinstance(value, str):
        raise ConfigError(
            f"FREQGUARD_BACKEND must be a backend URL (memory://, redis://...){also}, "
            f"got {shown(value)}"
        )
    try:
        parse_url(value)
    except ConfigError as exc:
        raise ConfigError(f"FREQGUARD_BACKEND: {exc}") from None
    return value


def unknown_setting(name: str, known: Collection[str], meant: Mapping[str, str]) -> str | None:
    """The error for ``name`` when it is a ``FREQGUARD_*`` setting freqguard does not read
    (naming the one meant: a peer's spelling in ``meant``, else the closest known one);
    None for any other name."""
    if not name.startswith("FREQGUARD_") or name in known:
        return None
    argument = GUARDS.get(name)
    if argument is not None:  # the guard's own: a guard made with it
        return (
            f"unknown setting {name}: {argument} is the guard's: give the integration a guard "
            f"made with it (Flask: FreqGuard(app, guard=Guard(backend_from_url(url), "
            f"{argument}=...)); Django: FREQGUARD_BACKEND = Guard(backend_from_url(url), "
            f"{argument}=...)), or set it in FREQGUARD_CONFIG's file"
        )
    guess = meant.get(name) or next(iter(difflib.get_close_matches(name, list(known), 1)), None)
    hint = f"did you mean {guess}? " if guess else ""
    return f"unknown setting {name}: {hint}freqguard reads {', '.join(sorted(known))}"


def peer_setting(
    name: str, peer: str, meant: Mapping[str, str], ways: Mapping[str, str], page: str
) -> str | None:
    """The warning for ``name`` when it is a ``RATELIMIT_*`` setting of ``peer``, which
    freqguard does not read: the setting to set instead (``meant``), else freqguard's way
    (``ways``), else the page that maps the peer's idioms; None for any other name."""
    if not name.startswith("RATELIMIT_"):
        return None
    way = f"set {meant[name]}" if name in meant else ways.get(name, f"see {page}")
    return f"{name} is {peer}'s setting, which freqguard does not read: {way}"


def configured(settings: Mapping[str, Any]) -> Config | None:
    """The configuration ``FREQGUARD_CONFIG`` names (a path or a loaded :class:`Config`);
    None when it is not set.

    Raises:
        ConfigError: ``FREQGUARD_BACKEND`` set too (the file names the backend).
    """
    given = settings.get("FREQGUARD_CONFIG")
    if given is None:
        return None
    if "FREQGUARD_BACKEND" in settings:
        raise ConfigError(
            "FREQGUARD_CONFIG names the backend: set it or FREQGUARD_BACKEND, not both"
        )
    if isinstance(given, Config):
        return given
    if not isinstance(given, (str, os.PathLike)):
        raise ConfigError(
            "FREQGUARD_CONFIG takes a configuration file's path (a str or a Path) or a "
            f"loaded Config, got {shown(given, 60)}"
        )
    return load(given)
