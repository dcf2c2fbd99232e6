"""``errors.shown``: a long integer named by its count of digits, which must be its count,
and its sign (``cost must be an integer >= 0, got an integer of 41 digits`` for a
negative one says nothing of what is wrong)."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Guard, MemoryBackend, Policy, Rule
from freqguard.errors import shown


@pytest.mark.parametrize("digits", [41, 100, 101, 300, 1000, 4301])
def test_a_long_integer_is_shown_by_its_count_of_digits(digits: int) -> None:
    # 10**n - 1 (n nines): math.log10 rounds it up to n, and n + 1 digits were said
    assert shown(10**digits - 1) == f"an integer of {digits} digits"
    assert shown(10 ** (digits - 1)) == f"an integer of {digits} digits"


def test_a_long_negative_integer_is_shown_negative() -> None:
    assert shown(-(10**50)) == "a negative integer of 51 digits"


def test_a_long_negative_cost_is_refused_saying_negative() -> None:
    guard = Guard(MemoryBackend(), [Policy("p", Rule("5/minute", by="user"))])
    with pytest.raises(ConfigError, match="got a negative integer of 51 digits"):
        guard.hit("p", -(10**50), user="a")
