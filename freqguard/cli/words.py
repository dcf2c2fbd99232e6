"""What the operator's commands take from their words, checked before anything is sent:
the policy, its context values (only the names it takes), and a store that is shared."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence

from freqguard.config import ENV, Config
from freqguard.config.schema import shown
from freqguard.errors import ConfigError
from freqguard.errors import shown as value_shown
from freqguard.policy import Policy

__all__ = [
    "MEMORY_KEEPS_NOTHING",
    "SHARED_STORE",
    "checked_names",
    "context",
    "policy_named",
    "shared_store",
]

#: What to name in place of memory://.
SHARED_STORE = (
    'a shared store: backend = "redis://host:6379/0" in the file, or '
    f"{ENV}=redis://host:6379/0 (which wins over the file's)"
)
#: Why a command that reads or changes the store refuses memory://, and what to use.
MEMORY_KEEPS_NOTHING = (
    "memory keeps nothing between processes: this process would act on a store of its "
    "own, gone when it ends, which the guards of every other process never see. Name "
    + SHARED_STORE
)


def shared_store(backend: str, what: str, source: str | None = None) -> None:
    """Refuse ``what`` (a command) on a store that is not shared between processes.

    Args:
        backend: the store's URL.
        what: the command, as the message names it.
        source: where the URL came from (default: ``FREQGUARD_URL`` when it is set, else
            the configuration's backend).

    Raises:
        ConfigError: ``backend`` is ``memory://``.
    """
    if backend.partition("://")[0].lower() == "memory":
        if source is None:
            source = ENV if os.environ.get(ENV) else "the configuration's backend"
        raise ConfigError(f"{what} on memory:// ({source}): {MEMORY_KEEPS_NOTHING}")


def with_policies(config: Config, path: str, command: str) -> Config:
    """``config``, loaded from ``path``, if it declares a policy.

    Raises:
        ConfigError: it declares none: ``command`` would limit nothing (a wrong file).
    """
    if not config.policies:
        raise ConfigError(
            f"{shown(path)} declares no policy: nothing for freqguard {command} to do "
            "(a policy is a [[policy]] table with a name and rules: docs/config.md)"
        )
    return config


def alike(names: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of ``names`` one typing slip apart (``recipent``, ``recipient``), as the
    settings' and the configuration's "did you mean" tell them (``difflib``), each name
    of five characters or more."""
    ordered = sorted(name for name in names if len(name) >= 5)
    return [
        (a, b)
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if difflib.SequenceMatcher(None, a, b).ratio() >= 0.85
    ]


def policy_named(config: Config, name: str) -> Policy:
    """The configuration's policy of that name.

    Raises:
        ConfigError: no policy has it (the message lists those there are).
    """
    for policy in config.policies:
        if policy.name == name:
            return policy
    known = ", ".join(repr(policy.name) for policy in config.policies) or "none"
    raise ConfigError(f"unknown policy {value_shown(name)} (the configuration has: {known})")


def context(pairs: Sequence[str], policy: Policy) -> dict[str, str]:
    """``k=v`` words as a context for ``policy``: each name one it takes (a dimension, or
    a value its rules read), so that no word reaches the guard as one of its own
    parameters (``policy=``, ``cost=``, ``ttl=``...).

    Raises:
        ConfigError: a word without ``=``, a name given twice, a name the policy does not
            take (the message lists those it does).
    """
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"context values are name=value, got {value_shown(pair)}")
        if name in found:
            raise ConfigError(f"context value {value_shown(name)} given twice")
        found[name] = value
    checked_names(found, policy)
    return found


def checked_names(found: Mapping[str, object], policy: Policy) -> None:
    """Refuse a context name ``policy`` does not take (a dimension, or a value its rules
    read): the guard's own parameters (``policy``, ``cost``, ``ttl``...) among them.

    Raises:
        ConfigError: naming each, and listing what the policy takes.
    """
    takes = {*policy.dimensions, *policy.reads}
    unknown = [name for name in found if name not in takes]
    if unknown:
        wanted = ", ".join(policy.dimensions) or "none"
        if policy.reads:
            wanted += f"; and may read: {', '.join(policy.reads)}"
        names = ", ".join(shown(name) for name in unknown)
        raise ConfigError(
            f"policy {policy.name!r} takes no context value {names} (it takes: {wanted})"
        )
