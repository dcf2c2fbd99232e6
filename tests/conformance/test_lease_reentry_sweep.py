"""A Ctrl-C at every point of a sync lease block's first ``with``, then the same block
entered again (design note 114: a block whose entry ended, or was interrupted, may be
entered again). The sweep is ``test_lease_sweeps.py``'s (Python's profile hook raising
the SIGINT at each point where the interpreter runs a pending signal's handler)."""

from __future__ import annotations

from freqguard import Guard
from tests.conformance.test_lease_interrupts import _main_thread_only  # noqa: F401 (autouse)
from tests.conformance.test_lease_sweeps import _ctrl_c_at, swept  # noqa: F401 (fixture)


def test_a_ctrl_c_anywhere_in_a_blocks_first_with_leaves_it_enterable_again(
    swept: Guard,  # noqa: F811 (the fixture imported)
) -> None:
    """At each point in turn, the block that met the Ctrl-C is entered again: it takes a
    lease and gives it back, none left held. A Ctrl-C as its one-`with` lock's acquire
    returned (before the ``try`` that lets it go) left the block refused "for one `with`
    at a time" for good, nobody in it."""
    block = swept.lease("llm", user="u")

    def first() -> None:
        with block as decision:
            assert decision.allowed

    total = _ctrl_c_at(None, first)
    locked = []
    for event in range(1, total + 1):
        _ctrl_c_at(event, first)
        try:
            with block as decision:
                assert decision.allowed
        except RuntimeError:
            locked.append(event)
            block = swept.lease("llm", user="u")
        held = 2 - swept.peek("llm", user="u").rules[0].remaining
        assert held == 0, f"a Ctrl-C at event {event} of {total} left {held} lease(s) held"
    assert locked == [], f"{len(locked)} of {total} points left the block locked: {locked}"
