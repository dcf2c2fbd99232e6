"""What ``@capped`` does with a call refused (``on_exceeded``, checked as the cap is made),
and how it takes a policy that holds leases (a concurrency rule): a lease for each call,
held while it runs (``Guard.lease``); never waited for, never by a ``with`` block."""

from __future__ import annotations

from collections.abc import Sequence

from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard

__all__ = ["check_exceeded", "leased", "refuse_block"]


def check_exceeded(on_exceeded: object, timeout: object, rules: Sequence[object]) -> None:
    """Refuse an ``on_exceeded`` that is no mode, a ``timeout`` that nothing waits for
    (throttled-py's ``timeout=`` waits: here ``on_exceeded="wait"`` does), and a wait
    for a cap's own rules that count leases (as :func:`leased` does a policy's).

    Raises:
        ConfigError: naming what is taken.
    """
    if not callable(on_exceeded) and on_exceeded not in ("raise", "skip", "wait"):
        raise ConfigError(
            f"on_exceeded must be 'raise', 'skip', 'wait' or a callable, got {on_exceeded!r}"
        )
    if timeout is not None and on_exceeded != "wait":
        raise ConfigError(
            f"timeout={timeout!r} is how long on_exceeded='wait' waits for the call's turn; "
            f"with on_exceeded={on_exceeded!r} nothing waits: add on_exceeded='wait', or "
            "drop timeout"
        )
    if on_exceeded == "wait" and any(getattr(rule, "lease", None) for rule in rules):
        raise ConfigError(
            "a cap whose rules count leases (a concurrency rule) cannot wait: "
            "on_exceeded='wait' waits for a rate's turn, and a lease frees when another call "
            "ends; use 'raise', 'skip' or a function"
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


def refuse_block(guard: Guard | AsyncGuard, name: str) -> None:
    """A ``with capped(...)`` block of a policy that holds leases is refused: the block
    would take a lease with nothing to give it back (``guard.lease`` does both)."""
    if guard.policies[name].leases:
        raise ConfigError(
            f"policy {name!r} counts leases: take one with guard.lease({name!r}, ...), "
            "which gives it back when its block ends"
        )
