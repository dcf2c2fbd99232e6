"""A configuration file read, checked and turned into a :class:`Config`.

Every error is a :class:`~freqguard.ConfigError` that names the file, the line where the
format gives one (TOML: the policy's or rule's table, or the key's line; YAML: the node's),
the policy and the rule, and what is allowed there. Nothing is built from a file that fails.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from itertools import islice
from pathlib import Path
from typing import Any

from freqguard._async.guard import AsyncGuard
from freqguard._sync.guard import Guard
from freqguard.backends.urls import async_backend_from_url, backend_from_url, parse_url
from freqguard.clock import Clock
from freqguard.config.places import (
    MOST_PROBLEMS,
    Where,
    key_named,
    listed,
    named_path,
    parse_yaml,
    place_of,
    toml_lines,
    unnamed,
)
from freqguard.config.rule_tables import rule_document, rule_of
from freqguard.config.schema import errors
from freqguard.engine.breaker import Breaker
from freqguard.engine.denycache import DenyCache
from freqguard.engine.shared import shared_out
from freqguard.errors import ConfigError, install
from freqguard.observe.base import LoggingObserver, Observer
from freqguard.policy import Fallback, Policy, QuietHours
from freqguard.rules import check_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (3.10)
    import tomli as tomllib

__all__ = ["ENV", "Config", "load", "loads"]

#: The environment variable whose backend URL wins over the file's.
ENV = "FREQGUARD_URL"
#: The largest configuration file read, in bytes (larger is refused unread).
MAX_FILE = 4 << 20


@dataclass(frozen=True)
class Config:
    """A configuration, checked: make guards from it with :meth:`guard` / :meth:`async_guard`.

    Attributes:
        source: the file it was read from (or what :func:`loads` was told).
        backend: the backend URL: ``FREQGUARD_URL`` when set, else the file's, else
            ``"memory://"``.
        policies: the policies, in the file's order.
    """

    source: str
    backend: str
    policies: tuple[Policy, ...]
    prefix: str = "fg"
    deny_cache: int = 0
    _on_error: object = "raise"
    _policy_on_error: Mapping[str, object] = field(default_factory=dict)
    _observers: tuple[str, ...] = ()
    _breaker: object = True

    def guard(self, clock: Clock | None = None, *, observers: Iterable[Observer] = ()) -> Guard:
        """A :class:`~freqguard.Guard` on the configured backend, with every policy
        (``observers``: besides the configured ones)."""
        policies, options = self._arguments(backend_from_url)
        options["observers"] = [*options["observers"], *observers]
        return Guard(backend_from_url(self.backend), policies, clock, **options)

    def async_guard(
        self, clock: Clock | None = None, *, observers: Iterable[Observer] = ()
    ) -> AsyncGuard:
        """An :class:`~freqguard.AsyncGuard` on the configured backend, with every policy
        (``observers``: besides the configured ones)."""
        policies, options = self._arguments(async_backend_from_url)
        options["observers"] = [*options["observers"], *observers]
        return AsyncGuard(async_backend_from_url(self.backend), policies, clock, **options)

    def document(self) -> dict[str, Any]:
        """The configuration as a document of the file's shape (every default written out,
        rates in a canonical spelling): :func:`loads` of it, as TOML or YAML, gives an equal
        configuration."""
        policies = []
        for policy in self.policies:
            entry: dict[str, Any] = {"name": policy.name}
            on_error = self._policy_on_error.get(policy.name, policy.on_error)
            if on_error is not None:
                entry["on_error"] = dict(on_error) if isinstance(on_error, Mapping) else on_error
            if policy.priorities:
                entry["priorities"] = list(policy.priorities)
            quiet = policy.quiet
            if quiet is not None:
                zone = {"tz": quiet.tz} if quiet.tz is not None else {"tz_from": quiet.tz_from}
                times = {"start": quiet.text(quiet.start), "end": quiet.text(quiet.end)}
                entry["quiet"] = {**times, **zone, "exempt": list(quiet.exempt)}
            entry["rules"] = [rule_document(r) for r in policy.rules if r.quiet is None]
            policies.append(entry)
        on_error = self._on_error
        breaker = self._breaker
        return {
            "backend": self.backend,
            "prefix": self.prefix,
            "on_error": dict(on_error) if isinstance(on_error, Mapping) else on_error,
            "deny_cache": self.deny_cache,
            "observers": list(self._observers),
            "breaker": dict(breaker) if isinstance(breaker, Mapping) else breaker,
            "policy": policies,
        }

    def _arguments(self, make: Callable[[str], Any]) -> tuple[list[Policy], dict[str, Any]]:
        """The policies (a fallback's backend made by ``make``, of the guard's kind) and the
        guard's options."""
        policies = [
            policy
            if policy.name not in self._policy_on_error
            else Policy(
                policy.name,
                *policy.rules,
                on_error=_on_error(self._policy_on_error[policy.name], make),
                priorities=policy.priorities,
            )
            for policy in self.policies
        ]
        return policies, {
            "prefix": self.prefix,
            "on_error": _on_error(self._on_error, make),
            "deny_cache": self.deny_cache,
            "observers": [_observer(name) for name in self._observers],
            "breaker": _breaker(self._breaker),
        }


def _breaker(value: object) -> Breaker | None:
    if value is False:
        return None
    return Breaker(**value) if isinstance(value, Mapping) else Breaker()


def _on_error(value: object, make: Callable[[str], Any]) -> object:
    if isinstance(value, Mapping):
        return Fallback(make(value["fallback"]), value.get("workers", 1))
    return value


#: The metrics observers configurations make, one per process, shared by every guard made
#: from any configuration: each reports to its library's process-wide registry or meter
#: provider, which takes freqguard's metrics once. A logging observer is made per guard.
_METRICS: dict[str, Observer] = {}
_METRICS_LOCK = threading.Lock()


def _observer(name: str) -> Observer:
    if name == "logging":
        return LoggingObserver()
    with _METRICS_LOCK:
        made = _METRICS.get(name)
        if made is None:
            if name == "prometheus":
                from freqguard.observe.prometheus import PrometheusObserver

                made = PrometheusObserver()
            else:
                from freqguard.observe.otel import OpenTelemetryObserver

                made = OpenTelemetryObserver()
            _METRICS[name] = made
        return made


def load(path: str | os.PathLike[str]) -> Config:
    """Read a configuration file: TOML (``.toml``), or YAML (``.yaml``/``.yml``, when PyYAML
    is installed).

    Raises:
        ConfigError: the file cannot be read or parsed, or breaks the schema (an unknown
            key, a value of the wrong kind), or a policy or rule is invalid.
    """
    path = Path(path)
    named = named_path(str(path))
    kind = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(f"{named}: a configuration file is .toml, .yaml or .yml")
    raw = _read(path, named)
    if len(raw) > MAX_FILE:
        raise ConfigError(f"{named}: larger than {MAX_FILE >> 20} MiB: not a configuration")
    return loads(_text(raw, named), kind, named)


def _read(path: Path, named: str) -> bytes:
    """The first bytes of a file, past the largest configuration's."""
    try:
        if not path.exists() or path.is_file():  # not a folder, nor a FIFO (open() blocks)
            with path.open("rb") as file:
                return file.read(MAX_FILE + 1)
    except OSError as exc:  # a name too long for the system too
        raise ConfigError(f"{named}: cannot be read: {exc.strerror or exc}") from None
    except ValueError:  # stat() and open() refuse a NUL
        raise ConfigError(f"{named}: a path holds no NUL character") from None
    raise ConfigError(f"{named}: not a file")


def _text(raw: bytes, source: str) -> str:
    """A file's bytes as text: UTF-8 (a byte-order mark is skipped)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = exc.start + (3 if raw.startswith(codecs.BOM_UTF8) else 0)
        line = raw.count(b"\n", 0, at) + 1
        raise ConfigError(
            f"{source}:{line}: not UTF-8: byte 0x{raw[at]:02x} at offset {at}; "
            "a configuration file is UTF-8 text"
        ) from None


def loads(text: str, kind: str = "toml", source: str = "<string>") -> Config:
    """A configuration from its text (``kind``: ``"toml"`` or ``"yaml"``); see :func:`load`."""
    if kind == "toml":
        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        except ValueError:  # an integer past Python's digit limit (tomllib says nothing else)
            long = re.search(rf"[0-9_]{{{sys.get_int_max_str_digits()},}}", text)
            line = "" if long is None else f":{text.count(chr(10), 0, long.start()) + 1}"
            raise ConfigError(f"{source}{line}: an integer too long to read") from None
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply to be a configuration") from None
        where = toml_lines(text)
    elif kind == "yaml":
        data, where = parse_yaml(text, source)
    else:
        raise ConfigError(f"kind must be 'toml' or 'yaml', got {kind!r}")
    return _build(data, source, where)


def _build(data: object, source: str, where: Where) -> Config:
    """The configuration ``data`` holds; every problem found is told at once, each at its
    place (the schema's first, then the policies', rules' and options')."""
    broken = list(islice(errors(data), MOST_PROBLEMS + 1))
    if broken:
        raise listed(
            [f"{place_of(source, where, e.path, data)}:{key_named(e)} {e.message}" for e in broken],
            source,
        )
    assert isinstance(data, Mapping)
    problems: list[str] = []

    def told(path: tuple[str | int, ...], what: str, exc: ConfigError) -> None:
        problems.append(f"{place_of(source, where, path, data)}: {what}{exc}")
        if len(problems) > MOST_PROBLEMS:  # what is shown is found: the rest is not sought
            raise listed(problems, source)

    if "backend" in data:  # checked even when FREQGUARD_URL wins now: it may not elsewhere
        try:
            parse_url(data["backend"])
        except ConfigError as exc:
            told(("backend",), "backend: ", exc)
    url = os.environ.get(ENV) or data.get("backend", "memory://")
    if os.environ.get(ENV):
        try:
            parse_url(url)
        except ConfigError as exc:
            problems.append(f"{ENV}: backend: {exc}")
    policies, fallbacks, made = [], {}, {}
    for index, raw in enumerate(data.get("policy", [])):
        rules = []
        for number, table in enumerate(raw["rules"]):
            try:
                rules.append(rule_of(table))
            except ConfigError as exc:
                told(("policy", index, "rules", number), "", exc)
        on_error = raw.get("on_error")
        try:
            quiet = None if raw.get("quiet") is None else QuietHours(**raw["quiet"])
        except ConfigError as exc:
            told(("policy", index, "quiet"), "", exc)
            continue
        if len(rules) < len(raw["rules"]):  # a policy of the rules that parsed would mislead
            continue
        try:
            policies.append(
                Policy(
                    raw["name"],
                    *rules,
                    on_error=on_error if isinstance(on_error, str) else None,
                    priorities=raw.get("priorities", ()),
                    quiet=quiet,
                )
            )
        except ConfigError as exc:  # the place names the policy: the message need not again
            told(("policy", index), "", unnamed(exc, raw["name"]))
            continue
        made[index] = policies[-1]
        if isinstance(on_error, Mapping):
            fallbacks[raw["name"]] = on_error
    for problem in _check_options(data, source, where, policies, made):
        problems.append(problem)
        if len(problems) > MOST_PROBLEMS:
            break
    names = [raw["name"] for raw in data.get("policy", [])]
    for index, name in enumerate(names):
        if name in names[:index]:
            place = place_of(source, where, ("policy", index), data)
            problems.append(f"{place}: a second policy named {name!r}")
    if problems:
        raise listed(problems, source)
    return Config(
        source,
        url,
        tuple(policies),
        data.get("prefix", "fg"),
        data.get("deny_cache", 0),
        data.get("on_error", "raise"),
        fallbacks,
        tuple(data.get("observers", ())),
        data.get("breaker", True),
    )


#: each observer's module, and the extra that installs it
_EXTRAS = {
    "prometheus": ("prometheus_client", "prometheus"),
    "opentelemetry": ("opentelemetry", "otel"),
}


def _check_options(
    data: Mapping[str, Any],
    source: str,
    where: Where,
    policies: list[Policy],
    made: Mapping[int, Policy],
) -> list[str]:
    """Every option checked now, as the guard will take it: nothing fails at the first hit
    (and no connection is made); each problem at its place."""
    problems: list[str] = []

    def fail(path: tuple[str | int, ...], problem: str) -> None:
        problems.append(f"{place_of(source, where, path, data)}: {problem}")

    try:
        DenyCache(data.get("deny_cache", 0))
    except ConfigError as exc:
        fail(("deny_cache",), f"deny_cache: {exc}")
    if "prefix" in data:
        try:
            check_name("key prefix", data["prefix"])
        except ConfigError as exc:
            fail(("prefix",), f"prefix: {exc}")
    for position, name in enumerate(data.get("observers", ())):
        needs = _EXTRAS.get(name)
        if needs is not None and find_spec(needs[0]) is None:
            module, extra = needs
            fail(
                ("observers", position),
                f"observer {name!r} needs {module} installed: {install(extra)}",
            )
    try:
        _breaker(data.get("breaker", True))
    except ConfigError as exc:
        fail(("breaker",), f"breaker: {exc}")
    tables: list[tuple[tuple[str | int, ...], object, list[Policy]]] = [
        (("on_error",), data.get("on_error"), policies)
    ]
    for index, raw in enumerate(data.get("policy", [])):  # each policy's own table, its
        # URL checked though the policy could not be made (its limits shared out if it was)
        place: tuple[str | int, ...] = ("policy", index, "on_error")
        tables.append((place, raw.get("on_error"), [made[index]] if index in made else []))
    for path, value, covered in tables:
        if not isinstance(value, Mapping):
            continue
        try:
            parse_url(value["fallback"])
        except ConfigError as exc:
            fail(path, f"on_error fallback: {exc}")
        for policy in covered:
            try:
                shared_out(policy, value.get("workers", 1))
            except ConfigError as exc:
                fail(path, str(exc))
    return problems
