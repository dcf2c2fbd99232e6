"""A context value the guard refuses is named by its field (``context.tz``, in a batch
``contexts[1].tz``), as a missing or unknown dimension is: an operator's first hour found a
missing zone, a priority and a limit's unknown name all blamed on ``context`` whole, so a
service's 422 named no field a client could fix."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule

ZONED = Policy("z", Rule("2/day", by="u", name="d", calendar=True, tz_from="tz"))
RANKED = Policy("r", Rule("2/minute", by="u", name="m", only=["high"]), priorities=["high", "low"])


def _guard() -> Guard:
    return Guard(MemoryBackend(ManualClock(1_700_000_000)), [ZONED, RANKED])


CASES: dict[str, tuple[Callable[[Guard], object], str]] = {
    "a zone missing": (lambda g: g.hit("z", u="a"), "context.tz"),
    "a zone unknown": (lambda g: g.hit("z", u="a", tz="Mars/Base"), "context.tz"),
    "a zone missing in a batch": (
        lambda g: g.hit_many("z", [{"u": "a", "tz": "UTC"}, {"u": "b"}]),
        "contexts[1].tz",
    ),
    "a priority missing": (lambda g: g.hit("r", u="a"), "context.priority"),
    "a priority unknown": (lambda g: g.hit("r", u="a", priority="urgent"), "context.priority"),
    "a limit's unknown name": (lambda g: g.limits_for("z", u="a", x="1"), "context.x"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_context_value_is_named_by_its_field(case: str) -> None:
    call, field = CASES[case]
    with pytest.raises(ConfigError) as caught:
        call(_guard())
    assert caught.value.argument == field
