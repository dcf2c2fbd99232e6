"""``ManualClock(start)`` and ``ManualClock.set(seconds)`` take a finite number of seconds
and refuse anything else with a ``ConfigError`` naming the call and the value, as
``advance`` does: a finite float past what microseconds hold (past 1.797e302), NaN, infinity, a
string or a bool raised Python's own ``OverflowError``/``ValueError``/``TypeError``, naming
neither (an adversarial pass on the operations, which draw such times)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from freqguard import ConfigError, ManualClock

BAD = [1e303, -1e303, math.inf, -math.inf, math.nan, "10", True, None, b"1", [1]]


@pytest.mark.parametrize("start", BAD, ids=repr)
def test_a_start_that_is_no_finite_number_of_seconds_is_refused_naming_it(start: object) -> None:
    with pytest.raises(ConfigError, match=r"ManualClock\(start\) takes .*seconds") as refused:
        ManualClock(start)  # type: ignore[arg-type]
    assert repr(start) in str(refused.value)


@pytest.mark.parametrize("seconds", BAD, ids=repr)
def test_a_set_to_no_finite_number_of_seconds_is_refused_and_keeps_the_time(
    seconds: object,
) -> None:
    clock = ManualClock(1_000.0)
    with pytest.raises(ConfigError, match=r"ManualClock.set takes .*seconds") as refused:
        clock.set(seconds, backwards=True)  # type: ignore[arg-type]
    assert repr(seconds) in str(refused.value)
    assert clock.now() == 1_000.0


def test_numbers_the_clock_takes_still_work() -> None:
    from decimal import Decimal
    from fractions import Fraction

    assert ManualClock(Fraction(3, 2)).now_us() == 1_500_000  # type: ignore[arg-type]
    clock = ManualClock(Decimal("1.25"))  # type: ignore[arg-type]
    clock.set(2, backwards=False)
    assert clock.now_us() == 2_000_000
    clock.set(-5.5, backwards=True)
    assert clock.now_us() == -5_500_000


@pytest.mark.parametrize("call", ["start", "set"])
def test_a_finite_time_past_what_the_clock_holds_is_refused_naming_the_bound(call: str) -> None:
    """1.8e302 s is finite, but past what microseconds in a float hold: the refusal said
    "takes a finite number of seconds" of a finite number, and not what is allowed."""
    with pytest.raises(ConfigError, match=r"at most 1\.797e\+302 .*got 1\.8e\+302"):
        ManualClock(1.8e302) if call == "start" else ManualClock(0).set(1.8e302)
    assert ManualClock(1.79e302).now() == 1.79e302


@pytest.mark.parametrize("call", ["start", "set", "advance"])
@pytest.mark.parametrize("digits", [401, 5001])
def test_an_integer_of_many_digits_is_refused_shown_short(call: str, digits: int) -> None:
    """An int past 4,300 digits cannot even be printed (Python refuses it): the refusal
    raised that ValueError instead of a ConfigError; one of 401 digits was printed whole."""
    seconds = 10 ** (digits - 1)
    clock = ManualClock(0)
    calls: dict[str, Callable[[int], object]] = {
        "start": ManualClock,
        "set": clock.set,
        "advance": clock.advance,
    }
    with pytest.raises(ConfigError, match=r"got (an|a negative) integer of \d+ digits") as refused:
        calls[call](seconds)
    assert len(str(refused.value)) < 200
    assert clock.now() == 0
