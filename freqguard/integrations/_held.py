"""Leases a request holds: the hit that takes one for a policy with a concurrency rule,
the body that holds them until the server closes it, and their release, each given back
though another's release failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

from freqguard.decision import Decision
from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard

__all__ = ["HeldBody", "arelease_each", "leasing", "leasing_async", "release_each"]


def leasing(guard: Guard, held: list[Decision]) -> Callable[..., Decision]:
    """``guard.hit``, but a policy with a concurrency rule takes a lease; an admitted one
    goes into ``held``, for the caller to give back when its request has been answered. A
    cost past this request's capacity (a per-key limit's, a priority's) raises ``Unfit``,
    which the caller answers as the denial it carries (a 429 without ``Retry-After``)."""

    def hit(name: str, cost: int, **ctx: object) -> Decision:
        if not guard.policies[name].leases:
            return guard.hit(name, cost, **ctx)
        decision = guard.take_lease(name, cost, **ctx)
        if decision.allowed:
            held.append(decision)
        return decision

    return hit


def leasing_async(guard: AsyncGuard, held: list[Decision]) -> Callable[..., Awaitable[Decision]]:
    """:func:`leasing` for an ``AsyncGuard``."""

    async def hit(name: str, cost: int, **ctx: object) -> Decision:
        if not guard.policies[name].leases:
            return await guard.hit(name, cost, **ctx)
        decision = await guard.take_lease(name, cost, **ctx)
        if decision.allowed:
            held.append(decision)
        return decision

    return hit


def release_each(
    guard: Guard, held: Sequence[Decision], uncounted: Sequence[Decision] = ()
) -> None:
    """Every lease of ``held`` given back, but one given back already (its receipt spent:
    a refund or a release by the view, or an earlier pass); one of ``uncounted`` (a call
    the app chose not to count, its lease held until now) refunded whole, its rate units
    too, or released if a deploy since refuses that refund. A release that fails keeps
    none of the others: its error is raised once each was tried. A Ctrl-C (or a stop
    signal's exit) as a release begins, before the guard holds one back, cuts it unsent:
    it is sent then, once more (a release that failed under it is tried again)."""
    failed: BaseException | None = None
    for decision in held:
        try:
            if _unspent(decision):
                if any(decision is other for other in uncounted):
                    with contextlib.suppress(ConfigError):  # a deploy since: released below
                        guard.refund(decision)
                if _unspent(decision):
                    guard.release(decision)
        except BaseException as exc:  # raised once the others were tried
            if not isinstance(exc, Exception) and _unspent(decision):
                with contextlib.suppress(Exception):  # its error is not the one to raise
                    guard.release(decision)
            failed = _first(failed, exc)
    if failed is not None:
        raise failed


def _unspent(decision: Decision) -> bool:
    """Whether ``decision`` still holds what it took (its receipt not spent)."""
    receipt = decision.receipt
    return receipt is not None and not receipt.spent


async def arelease_each(guard: AsyncGuard, held: Sequence[Decision]) -> None:
    """:func:`release_each` for an ``AsyncGuard``."""
    failed: BaseException | None = None
    for decision in held:
        receipt = decision.receipt
        if receipt is None or not receipt.spent:
            try:
                await guard.release(decision)
            except BaseException as exc:  # raised once the others were tried
                failed = _first(failed, exc)
    if failed is not None:
        raise failed


def _first(failed: BaseException | None, exc: BaseException) -> BaseException:
    """What to raise once every release was tried: the first failure, but a cancellation or
    a Ctrl-C before any error (a store's failure raised in its place had it lost)."""
    if failed is None or (isinstance(failed, Exception) and not isinstance(exc, Exception)):
        return exc
    return failed


class HeldBody:
    """A response body whose request holds leases: given back once, when the server closes
    the body (PEP 3333, and Django's ``response.close()``: once its last byte is sent, or
    the client went away), so the lease counts the request for as long as it is in flight.
    """

    def __init__(self, body: Iterable[bytes], release: Callable[[], object]) -> None:
        self._body, self._release, self._released = body, release, False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            if not self._released:
                self._released = True
                try:
                    self._release()
                except BaseException as exc:  # a Ctrl-C as it began: once more (what went
                    if not isinstance(exc, Exception):  # is not given back twice)
                        with contextlib.suppress(Exception):
                            self._release()
                    raise
