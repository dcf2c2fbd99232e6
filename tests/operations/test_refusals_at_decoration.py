"""Refused as the cap is made, not at its first call: a cap of a concurrency rule that
would wait. A review's finding, written failing first."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Guard, MemoryBackend, Rule, capped

# -- 2. a cap of a concurrency Rule waiting is refused at its first call only ---------------


def test_a_cap_of_a_concurrency_rule_waiting_is_refused_at_decoration() -> None:
    """This round refuses ``@capped("pool", guard=g, on_exceeded="wait")`` over a lease
    policy as it is decorated (``Capped.__call__``: ``leased(...)`` when ``_policy`` is in
    the guard's policies). A cap made from a concurrency ``Rule`` itself
    (``@capped(Rule("2 concurrent", lease=30), guard=g, on_exceeded="wait")``) knows it
    counts leases just as well at decoration (its rules are right there, and its policy is
    registered then when the key's dimensions are known), but is decorated, and refused at
    its first call: "policy 'capped....' counts leases: on_exceeded='wait' ...". Expected:
    the same ConfigError at decoration. Got: decorated."""
    guard = Guard(MemoryBackend())
    with pytest.raises(ConfigError, match="count leases"):  # got: no error

        @capped(Rule("2 concurrent", lease=30), guard=guard, on_exceeded="wait", key=dict)
        def send() -> int:
            return 1
