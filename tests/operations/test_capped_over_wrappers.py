"""``@capped`` on a lease policy over a wrapper of a generator function that is no
generator function itself (``contextlib.contextmanager``, one that consumes the generator)
returns what the wrapper returns: a review found both turned into generators when the cap
told generator functions through ``functools.wraps``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from freqguard import Guard, Policy, Rule, capped
from freqguard.backends.memory import MemoryBackend


def _leases() -> Guard:
    return Guard(MemoryBackend(), [Policy("db", Rule("2 concurrent", lease=60))])


def test_capped_over_a_contextmanager_on_a_lease_policy_stays_a_context_manager() -> None:
    """``@contextlib.contextmanager`` wraps a generator function with ``functools.wraps``;
    ``@capped`` now unwraps it, takes the call for a generator and returns a generator of
    its own: ``with session():`` raises TypeError (before the day's change the context
    manager came back, as the function returns it)."""
    guard = _leases()

    @capped("db", guard=guard)
    @contextlib.contextmanager
    def session() -> Iterator[str]:
        yield "conn"

    with session() as conn:
        assert conn == "conn"


def _listed(func: Callable[..., Iterator[int]]) -> Callable[..., list[int]]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> list[int]:
        return list(func(*args, **kwargs))

    return wrapper


def test_capped_over_a_wrapper_that_consumes_a_generator_returns_what_it_returns() -> None:
    """A wrapper made with ``functools.wraps`` that turns a generator into a list returns
    a list; under ``@capped`` on a lease policy it returned a generator (the unwrapped
    function's kind, not the call's)."""
    guard = _leases()

    @capped("db", guard=guard)
    @_listed
    def rows() -> Iterator[int]:
        yield 1
        yield 2

    assert rows() == [1, 2]
