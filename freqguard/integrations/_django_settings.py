"""The Django integration's settings: read once from ``django.conf.settings``, checked, and
reported through Django's system checks (``manage.py check``) as well as by the middleware.

An unknown ``FREQGUARD_*`` setting is an error naming the one it resembles
(``FREQGUARD_DEFAULT_LIMIT`` would otherwise leave every view uncapped, silently);
django-ratelimit's ``RATELIMIT_*`` settings, which freqguard does not read, are a warning
naming freqguard's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core import checks

from freqguard.config import Config
from freqguard.errors import ConfigError, shown
from freqguard.guard import Guard
from freqguard.headers import check_profile
from freqguard.integrations._drf_settings import setting_checks as drf_setting_checks
from freqguard.integrations._drf_throttles import throttle_checks
from freqguard.integrations._request import KeyFunc, check_key
from freqguard.integrations._settings import (
    COMMON,
    MEANT,
    backend_url,
    configured,
    peer_setting,
    unknown_setting,
)
from freqguard.rates import Rate, parse_rates

__all__ = [
    "SETTINGS",
    "Settings",
    "check_settings",
    "read_settings",
    "setting_problems",
    "their_key",
]

#: The settings freqguard reads.
SETTINGS = COMMON | {"FREQGUARD_KEY"}
#: What people coming from django-ratelimit type instead.
_MEANT = {
    **MEANT,
    "RATELIMIT_ENABLE": "FREQGUARD_ENABLED",
    "RATELIMIT_USE_CACHE": "FREQGUARD_BACKEND",
}
_GUARD = "FREQGUARD_BACKEND = Guard(backend_from_url(url), "
#: django-ratelimit's other settings, and freqguard's way for each.
_WAYS = {
    # what every key="ip" read: a cap's key= as well as FREQGUARD_KEY (read by none given)
    "RATELIMIT_IP_META_KEY": "behind your proxies, key by client_ip(['10.0.0.0/8'], "
    "header='x-real-ip') (their networks, the header they set): as each capped's key= "
    "where django-ratelimit's key='ip' read the setting (key=client_ip() keys the proxy), "
    "and as FREQGUARD_KEY for the default limits and the caps given no key=",
    "RATELIMIT_VIEW": "a refusal is a 429 here; for a page of your own, cap with block=False "
    "and answer from the view when request.limited",
    "RATELIMIT_EXCEPTION_CLASS": "a refusal is a 429 here, no exception; capped(block=False) "
    "leaves the answer to the view (request.limited)",
    "RATELIMIT_FAIL_OPEN": f"the store failing is the guard's on_error: {_GUARD}"
    "on_error='allow') fails open",
    "RATELIMIT_CACHE_PREFIX": f"the records' prefix is the guard's: {_GUARD}prefix='myapp')",
    "RATELIMIT_IPV4_MASK": "key by an address's prefix: client_ip(ipv4_prefix=24), as "
    "FREQGUARD_KEY or capped's key=",
    "RATELIMIT_IPV6_MASK": "key by an address's prefix: client_ip(ipv6_prefix=64) (the "
    "default), as FREQGUARD_KEY or capped's key=",
    "RATELIMIT_HASH_ALGORITHM": "nothing to choose: freqguard builds its own keys",
}
_PAGE = "docs/coming-from/django-ratelimit.md"


@dataclass(frozen=True)
class Settings:
    """The settings, checked: what the integration is built from."""

    backend: str | Guard  # a URL, or a Guard made in the settings module
    config: Config | None
    defaults: tuple[Rate, ...]
    headers: str
    enabled: bool
    key: KeyFunc | None  # None: the peer address


def setting_problems(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """The errors (unknown ``FREQGUARD_*`` settings, each naming the one meant) and the
    warnings (django-ratelimit's ``RATELIMIT_*`` settings, each naming freqguard's way)
    for a settings module's names."""
    errors: list[str] = []
    warnings: list[str] = []
    for name in sorted(names):
        unknown = unknown_setting(name, SETTINGS, _MEANT)
        theirs = peer_setting(name, "django-ratelimit", _MEANT, _WAYS, _PAGE)
        if unknown is not None:
            errors.append(unknown)
        elif theirs is not None:
            warnings.append(theirs)
    return errors, warnings


def _names() -> list[str]:
    return [name for name in dir(django_settings) if name.isupper()]


def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """Django system check: the problems of the ``FREQGUARD_*`` settings
    (``freqguard.E001`` unknown setting, ``freqguard.E002`` a bad value,
    ``freqguard.W001`` django-ratelimit's setting; ``freqguard.E003`` a DRF throttle rate
    a freqguard throttle would read and cannot, ``W002`` when none is seen to read it;
    ``freqguard.E004`` a view's freqguard throttle reading a scope with no rate,
    ``freqguard.E005`` a dotted path in a view's ``throttle_classes``, ``freqguard.E006`` a
    view's freqguard throttle with neither a rate nor a scope, ``freqguard.E007`` one
    budget given two sets of rules, ``freqguard.E008`` a view's cost its default limits
    cannot hold, ``freqguard.I001``
    the views whose throttles ``get_throttles()`` chooses, not seen, ``freqguard.W003`` a
    URLconf past the bound of the walk, ``freqguard.W004`` includes nested past its depth,
    ``freqguard.W005`` a misspelt scope the default limits take, ``freqguard.W008`` a view's
    ``throttle_scope`` none of its throttles reads, ``freqguard.E009`` DRF's
    throttle settings where DRF does not read them (:mod:`~freqguard.integrations._drf_settings`),
    ``freqguard.W006`` default
    limits without the middleware, ``freqguard.W007`` the middleware before the user is
    known to a key that reads it (:mod:`~freqguard.integrations._django_budgets`):
    see
    :mod:`freqguard.integrations._drf_throttles`)."""
    errors, warnings = setting_problems(_names())
    found: list[Any] = [checks.Error(text, id="freqguard.E001") for text in errors]
    if not errors:  # each bad value an error of its own
        found += [checks.Error(text, id="freqguard.E002") for text in value_problems()]
    found += [checks.Warning(text, id="freqguard.W001") for text in warnings]
    return found + throttle_checks() + drf_setting_checks()


def read_settings() -> Settings:
    """The settings, checked.

    Raises:
        ConfigError: every unknown ``FREQGUARD_*`` setting (naming the one meant), or else
            every bad value (naming it and what is allowed), one a line.
    """
    problems, config, values = _read()
    if problems:
        raise ConfigError(problems[0] if len(problems) == 1 else "\n".join(problems))
    default = values.get("FREQGUARD_DEFAULT_LIMITS")
    return Settings(
        values.get("FREQGUARD_BACKEND", "memory://"),
        config,
        parse_rates(default) if default else (),
        check_profile(values.get("FREQGUARD_HEADERS", "ietf"), "FREQGUARD_HEADERS"),
        values.get("FREQGUARD_ENABLED", True),
        values.get("FREQGUARD_KEY"),
    )


def value_problems() -> list[str]:
    """What is wrong with the ``FREQGUARD_*`` settings: the unknown ones, or else each bad
    value, all of them (a fix at a time, each shown by the next run, is the first hour's
    tax)."""
    return _read()[0]


def _read() -> tuple[list[str], Config | None, dict[str, Any]]:
    """The settings' problems, the configuration ``FREQGUARD_CONFIG`` names (read once:
    the one checked is the one used), and the settings' values."""
    errors, _ = setting_problems(_names())
    if errors:
        return errors, None, {}
    values = {name: getattr(django_settings, name) for name in SETTINGS if _has(name)}
    problems: list[str] = []
    for check in _VALUE_CHECKS:
        try:
            check(values)
        except ConfigError as error:
            problems.append(str(error))
    config = None
    read = dict(values)
    if "FREQGUARD_CONFIG" in values and "FREQGUARD_BACKEND" in values:  # and the file too
        problems.append(_NOT_BOTH)
        read.pop("FREQGUARD_BACKEND")
    try:
        config = configured(read)
    except ConfigError as error:
        problems.append(str(error))
    return problems, config, values


_NOT_BOTH = "FREQGUARD_CONFIG names the backend: set it or FREQGUARD_BACKEND, not both"


def _enabled(values: Mapping[str, Any]) -> None:
    enabled = values.get("FREQGUARD_ENABLED", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"FREQGUARD_ENABLED must be True or False, got {shown(enabled)}")


def _backend(values: Mapping[str, Any]) -> None:
    backend = values.get("FREQGUARD_BACKEND", "memory://")
    if not isinstance(backend, Guard):
        backend_url(backend, " or a Guard")


def _default_limits(values: Mapping[str, Any]) -> None:
    default = values.get("FREQGUARD_DEFAULT_LIMITS")
    if default is not None and not isinstance(default, str):
        raise ConfigError(
            f"FREQGUARD_DEFAULT_LIMITS must be rates ('100/hour'), got {shown(default)}"
        )
    if default:
        try:
            parse_rates(default)
        except ConfigError as exc:  # the rate parser's words, named where they were written
            raise ConfigError(f"FREQGUARD_DEFAULT_LIMITS: {exc}") from None


def _key(values: Mapping[str, Any]) -> None:
    key = values.get("FREQGUARD_KEY")
    if key is not None and not callable(key):
        raise ConfigError(
            f"FREQGUARD_KEY must be a key function (client_ip()), got {shown(key)}{their_key(key)}"
        )
    if key is not None:  # as capped(key=...) checks its own: one argument, not async
        check_key(key, "FREQGUARD_KEY")


_VALUE_CHECKS: tuple[Callable[[Mapping[str, Any]], object], ...] = (
    _enabled,
    _backend,
    _default_limits,
    _key,
    lambda values: check_profile(values.get("FREQGUARD_HEADERS", "ietf"), "FREQGUARD_HEADERS"),
)


def _has(name: str) -> bool:
    return hasattr(django_settings, name)


#: django-ratelimit's key strings, and what freqguard writes for them
_KEYS = {
    "ip": "client_ip()",
    "user": "user_or_ip()",
    "user_or_ip": "user_or_ip()",
    "header": "header('x-api-key')",
}


def their_key(key: object) -> str:
    """For a message refusing ``key``: the key function to write for django-ratelimit's
    key string (``'ip'``: ``client_ip()``), else ``""``."""
    if isinstance(key, str):
        kind, _, field = key.partition(":")
        meant = _KEYS.get(kind)
        if kind == "header" and field:  # their header, not an example's
            meant = f"header({field.lower()!r})"
        if kind in ("post", "get") and field:  # a form's field: Django's request reads it
            read = f"request.raw.{kind.upper()}.get({field!r}, '')"
            meant = f"lambda request: {{{field!r}: {read}}}"
        if meant is not None:
            return f"; django-ratelimit's key={shown(key)} is key={meant} here"
        module, dot, function = key.rpartition(".")
        if dot and module and all(part.isidentifier() for part in key.split(".")):
            return (
                f"; django-ratelimit imports a key's dotted path: import it here "
                f"(from {module} import {function}) and give key={function}, taking the "
                "request alone (a RequestInfo; Django's request is its .raw), not (group, request)"
            )
    return ""
