"""A Ctrl-C at every point of a ``MemoryBackend`` call where the interpreter runs a pending
signal's handler, in turn: the call's states are all written or none (design note 95), as a
Redis call's are (its script runs whole or not at all). Before, the memory twin wrote state
by state, and a sliding log in place: a hit interrupted at 21 of 126 points counted in some
rules and not in others, and a program that goes on after a ``KeyboardInterrupt`` (a REPL,
a notebook, a worker loop) then admitted past those rules' limits."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends._horizons import HorizonStore
from tests.conformance.test_lease_interrupts import _main_thread_only  # noqa: F401 (autouse)
from tests.conformance.test_lease_sweeps import _ctrl_c_at
from tests.conftest import START

#: one state per strategy that counts, all at the same limit: after any number of whole
#: calls, each rule has the same units left
ALIKE = Policy(
    "p",
    Rule("1000/minute", by="u", strategy="fixed-window", name="fw"),
    Rule("1000/minute", by="u", strategy="gcra", name="gcra"),
    Rule("1000/minute", by="u", strategy="token-bucket", name="tb"),
    Rule("1000/minute", by="u", strategy="rolling-window", name="rw"),
    Rule("1000/minute", by="u", name="log"),
    Rule("1000/minute", by=("u", "c"), name="content"),
)


def _left(guard: Guard) -> list[int]:
    return [rule.remaining for rule in guard.peek("p", u="x", c="m").rules]


def _sweep(guard: Guard, run: Callable[[], object], rules: slice = slice(None)) -> None:
    """``run`` with a Ctrl-C at each of its points in turn: after each, every rule (of
    ``rules``) has the same units left (the call was made whole, or not at all)."""
    total = _ctrl_c_at(None, run)
    assert total > 0
    for event in range(1, total + 1):
        _ctrl_c_at(event, run)
        left = _left(guard)[rules]
        assert len(set(left)) == 1, f"a Ctrl-C at point {event} of {total} left {left}"


@pytest.fixture
def guard() -> Guard:
    clock = ManualClock(START)
    made = Guard(MemoryBackend(clock=clock), [ALIKE], clock=clock)
    assert made.hit("p", u="x", c="m").allowed  # every state stored
    return made


def test_a_ctrl_c_anywhere_in_a_memory_hit_writes_all_its_states_or_none(guard: Guard) -> None:
    _sweep(guard, lambda: guard.hit("p", u="x", c="m"))


def test_a_ctrl_c_anywhere_in_a_memory_refund_gives_back_in_all_its_states_or_none(
    guard: Guard,
) -> None:
    def exactly() -> None:  # a hit, and the refund of its receipt: exact in every rule
        guard.refund(guard.hit("p", u="x", c="m"))

    def newest() -> None:
        guard.hit("p", u="x", c="m")
        guard.refund("p", 1, u="x", c="m")

    _sweep(guard, exactly)
    _sweep(guard, newest)


def test_a_ctrl_c_anywhere_in_a_memory_reset_forgets_all_its_states_or_none(
    guard: Guard,
) -> None:
    def again() -> None:  # the rules keyed by u alone
        guard.hit("p", u="x", c="m")
        guard.reset("p", u="x")

    _sweep(guard, again, slice(-1))


def test_a_ctrl_c_anywhere_in_a_memory_set_limit_keeps_the_limit_whole_or_not_at_all() -> None:
    """A per-key limit of 10 s set under a Ctrl-C at each point in turn: once its time
    and the stale grace have passed, a sweep finds nothing held (a limit kept without its
    expiry would be held for ever)."""
    clock = ManualClock(START)
    backend = MemoryBackend(clock=clock)
    guard = Guard(backend, [ALIKE], clock=clock)

    def limit() -> None:
        guard.set_limit("p", "fw", "5/minute", ttl=10, u="x")

    total = _ctrl_c_at(None, limit)
    for event in range(1, total + 1):
        _ctrl_c_at(event, limit)
        clock.advance(700)  # past the pinned grace (PINNED_GRACE_MS): as Redis expires it
        backend.sweep()
        assert backend.limits_held == 0, f"a Ctrl-C at point {event} of {total}"


def _entries(backend: MemoryBackend) -> int:
    """The states a memory backend really holds (``len`` reads its count)."""
    return sum(len(q.entries) for store in backend._stores for q in store.queues.values())


def test_a_ctrl_c_as_a_deploy_refiles_a_state_never_loses_it() -> None:
    """A deploy that adds a longer window moves a state under another horizon at its next
    read (``_refile``): a Ctrl-C between taking it from one queue and filing it in the
    other lost the state, and a sixth hit in a 5/minute window was admitted (3 of 90
    points; found by review)."""
    before = Policy("p", Rule("5/minute", by="u", name="x"))
    after = Policy("p", *before.rules, Rule("20 per 2 minutes", by="u", name="y"))

    def deployed() -> tuple[MemoryBackend, Guard]:
        clock = ManualClock(START)
        backend = MemoryBackend(clock=clock)
        old = Guard(backend, [before], clock=clock)
        assert all(old.hit("p", u="a").allowed for _ in range(5))
        return backend, Guard(backend, [after], clock=clock)

    backend, guard = deployed()
    total = _ctrl_c_at(None, lambda: guard.hit("p", u="a"))
    for event in range(1, total + 1):
        backend, guard = deployed()
        _ctrl_c_at(event, partial(guard.hit, "p", u="a"))
        assert not guard.hit("p", u="a").allowed, f"a Ctrl-C at point {event} of {total}"
        assert len(backend) == _entries(backend), event


@pytest.mark.parametrize("what", ["reset", "sweep", "evict"])
def test_a_ctrl_c_in_a_memory_reset_sweep_or_eviction_keeps_the_count_of_states(
    what: str,
) -> None:
    """A ``max_keys`` backend counts its states: a count lowered after the removal, with
    calls between, drifted for good under a Ctrl-C there (a reset at 1 of 112 points, a
    sweep at 2 of 24), and each drift took a slot for ever (found by review)."""
    policy = Policy("p", Rule("5/minute", by="u", name="x"))

    def made() -> tuple[ManualClock, MemoryBackend, Guard]:
        clock = ManualClock(START)
        backend = MemoryBackend(clock=clock, max_keys=2, when_full="evict")
        guard = Guard(backend, [policy])  # on the backend's time: a sweep finds them gone
        guard.hit("p", u="a")
        guard.hit("p", u="b")
        return clock, backend, guard

    def act(clock: ManualClock, backend: MemoryBackend, guard: Guard) -> Callable[[], object]:
        if what == "reset":
            return lambda: guard.reset("p", u="a")
        if what == "evict":
            return lambda: guard.hit("p", u="c")  # room made by evicting a state
        clock.advance(120)
        return backend.sweep

    total = _ctrl_c_at(None, act(*made()))
    for event in range(1, total + 1):
        clock, backend, guard = made()
        _ctrl_c_at(event, act(clock, backend, guard))
        assert len(backend) == _entries(backend), f"a Ctrl-C at point {event} of {total}"


def test_a_state_put_back_is_swept_at_most_a_window_late() -> None:
    """Putting back a state moved it behind the live ones of its queue, even one the call
    had not written: an expired state then outlived the sweeps (and ``evict`` dropped a
    live one before it) at 20 of 74 points (found by review). One the call had not
    written keeps its place now; one it had written goes back where the write put it,
    the queue's back, and is swept once the states before it are (a window late at most)."""
    policy = Policy("p", Rule("5/minute", by="u", name="x"))

    def made() -> tuple[ManualClock, MemoryBackend, Guard]:
        clock = ManualClock(START)
        backend = MemoryBackend(clock=clock)
        guard = Guard(backend, [policy])
        guard.hit("p", u="a")
        clock.advance(30)
        guard.hit("p", u="b")
        clock.advance(1)
        return clock, backend, guard

    clock, backend, guard = made()
    total = _ctrl_c_at(None, lambda: guard.hit("p", u="a"))
    late = 0
    for event in range(1, total + 1):
        clock, backend, guard = made()
        _ctrl_c_at(event, partial(guard.hit, "p", u="a"))
        if guard.peek("p", u="a").remaining == 3:
            continue  # the whole hit was made: a was written last
        clock.advance(40)  # a (written 71 s ago) is past its window and grace; b is not
        late += backend.sweep() == 0
        clock.advance(60)
        backend.sweep()
        assert len(backend) == _entries(backend) == 0, f"a Ctrl-C at point {event} of {total}"
    assert late <= 12  # cuts after the write (20 of 74 before the fix)


class _Second:
    """A second Ctrl-C at the ``armed``-th point of the next call of ``method`` (the
    profile hook armed again as it begins); ``fired``: it landed there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        self.armed, self.fired, method = 0, False, getattr(owner, name)

        def cut(*args: Any) -> None:
            event, self.armed = self.armed, 0  # once: the one made again is not cut
            if not event:
                method(*args)
                return
            try:
                _ctrl_c_at(event, partial(method, *args), within=method, swallow=False)
            except KeyboardInterrupt:
                self.fired = True
                raise

        monkeypatch.setattr(owner, name, cut)

    def sweep(self, run: Callable[[], object], check: Callable[[str], None]) -> int:
        """``run`` cut at each point, then again at each point of ``method`` the first
        cut calls: ``check`` after each (given where); how many pairs were cut."""
        total, both = _ctrl_c_at(None, run), 0
        for first in range(1, total + 1):
            for event in range(1, 200):
                self.armed, self.fired = event, False
                _ctrl_c_at(first, run)
                check(f"Ctrl-Cs at {first} of {total}, then {event}")
                if self.armed or not self.fired:  # not called, or no point left in it
                    break
                both += 1
        return both


def test_a_second_ctrl_c_as_a_cut_call_is_put_back_still_leaves_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C at each point of a hit, then a second one at each point of the put-back it
    starts: the states are all as the hit found them or all written, and the store's
    count is its states'. Before, the second cut the put-back part way (a state taken out
    and not filed again, or filed and not counted), and the rules' counts stayed apart."""
    second = _Second(monkeypatch, HorizonStore, "put_back")
    clock = ManualClock(START)
    backend = MemoryBackend(clock=clock)
    guard = Guard(backend, [Policy("p", *ALIKE.rules[::2], ALIKE.rules[-1])], clock=clock)
    guard.hit("p", u="x", c="m")  # every state stored

    def check(where: str) -> None:
        left = _left(guard)
        assert len(set(left)) == 1, f"{where}: {left}"
        assert len(backend) == _entries(backend), where

    assert second.sweep(partial(guard.hit, "p", u="x", c="m"), check) > 0


def test_a_second_ctrl_c_as_a_cut_set_limit_is_put_back_still_keeps_no_limit_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the put-back of states, the put-back of a record's per-key limits: cut at each
    point in turn, no limit is kept once its time has passed."""
    second = _Second(monkeypatch, HorizonStore, "_put_limits_back")
    clock = ManualClock(START)
    backend = MemoryBackend(clock=clock)
    guard = Guard(backend, [ALIKE], clock=clock)

    def check(where: str) -> None:
        clock.advance(700)  # past the pinned grace (PINNED_GRACE_MS): as Redis expires it
        backend.sweep()
        assert backend.limits_held == 0, where

    assert second.sweep(partial(guard.set_limit, "p", "fw", "5/minute", ttl=10, u="x"), check)


def test_a_put_back_that_fails_every_time_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A fault in the putting back (not a signal) is tried a few times, then logged with
    its error, the caller's first exception raised as it was (review: it was dropped
    without a word)."""
    from freqguard.script.twin import whole

    def broken() -> None:
        raise RuntimeError("broken store")

    with caplog.at_level("ERROR", logger="freqguard"):
        whole(broken)
    assert "could not be put back (8 tries): RuntimeError('broken store')" in caplog.text
