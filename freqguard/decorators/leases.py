"""How ``@capped`` takes a policy that holds leases (a concurrency rule): a lease for each
call, held while it runs (``Guard.lease``); never waited for, never by a ``with`` block."""

from __future__ import annotations

from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard

__all__ = ["leased", "refuse_block"]


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
