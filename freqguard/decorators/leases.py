"""What ``@capped`` does with a call refused (``on_exceeded``, checked as the cap is made),
and how it takes a policy that holds leases (a concurrency rule): a lease for each call,
held while it runs (``Guard.lease``); never waited for, never by a ``with`` block."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

from freqguard.errors import ConfigError, shown
from freqguard.guard import AsyncGuard, Guard
from freqguard.rules import Rule
from freqguard.strategy import Strategy

__all__ = ["check_context", "check_exceeded", "leased", "refuse_block"]


def check_exceeded(on_exceeded: object, timeout: object, rules: Sequence[object]) -> None:
    """Refuse an ``on_exceeded`` that is no mode, a ``timeout`` that nothing waits for
    (throttled-py's ``timeout=`` waits: here ``on_exceeded="wait"`` does), and a wait
    for a cap's own rules that count leases (as :func:`leased` does a policy's).

    Raises:
        ConfigError: naming what is taken.
    """
    if not callable(on_exceeded) and (
        not isinstance(on_exceeded, str) or on_exceeded not in ("raise", "skip", "wait")
    ):
        raise ConfigError(
            f"on_exceeded must be 'raise', 'skip', 'wait' or a callable, got {shown(on_exceeded)}"
        )
    if callable(on_exceeded):
        try:
            inspect.signature(on_exceeded).bind(None)
        except TypeError:
            raise ConfigError(
                f"on_exceeded={getattr(on_exceeded, '__name__', on_exceeded)!r} must take "
                "the denied Decision: on_exceeded=lambda decision: ..."
            ) from None
        except ValueError:  # no signature to read (a builtin): called as it is
            pass
    if timeout is not None and on_exceeded != "wait":
        raise ConfigError(
            f"timeout={shown(timeout)} is how long on_exceeded='wait' waits for the call's turn; "
            f"with on_exceeded={on_exceeded!r} nothing waits: add on_exceeded='wait', or "
            "drop timeout"
        )
    if on_exceeded == "wait" and any(getattr(rule, "lease", None) for rule in rules):
        raise ConfigError(
            "a cap whose rules count leases (a concurrency rule) cannot wait: "
            "on_exceeded='wait' waits for a rate's turn, and a lease frees when another call "
            "ends; use 'raise', 'skip' or a function"
        )


def check_context(context: object, decorating: bool = False) -> None:
    """Refuse a ``context`` that is no mapping of dimensions, or any on a decorated
    function (``decorating``), whose calls' keys come from ``key=``: nothing reads it."""
    if decorating and context is not None:
        raise ConfigError(
            f"context={shown(context, 60)} is the with-block's (with capped(..., context=...)); a "
            "decorated function's calls are keyed by key= (key='user' reads its argument)"
        )
    if context is not None and not isinstance(context, Mapping):
        raise ConfigError(
            f"context must be a mapping of dimension to value ({{'user': 'ann'}}), got "
            f"{shown(context, 60)}"
        )


def leased(guard: Guard | AsyncGuard, name: str, on_exceeded: object) -> bool:
    """Whether a call of policy ``name`` takes a lease, held while it runs.

    Raises:
        ConfigError: with ``on_exceeded="wait"``, which waits for a rate's turn only.
    """
    if not guard.policies[name].leases:
        return False
    if on_exceeded == "wait":
        raise ConfigError(
            f"policy {name!r} counts leases: on_exceeded='wait' waits for a rate's turn, "
            "and a lease frees when another call ends; use 'raise', 'skip' or a function"
        )
    return True


def refuse_block(guard: Guard | AsyncGuard, name: str, rules: Sequence[object] = ()) -> None:
    """A ``with capped(...)`` block of a policy that holds leases is refused: the block
    would take a lease with nothing to give it back (``guard.lease`` does both). ``rules``:
    the block's own, judged before a policy is made of them (nothing registered)."""
    leased = any(
        (isinstance(r, Rule) and r.strategy is Strategy.CONCURRENCY)
        or (isinstance(r, str) and "concurrent" in r)
        for r in rules
    )
    if leased or (not rules and guard.policies[name].leases):
        raise ConfigError(
            f"policy {name!r} counts leases: take one with guard.lease({name!r}, ...), "
            "which gives it back when its block ends"
        )
