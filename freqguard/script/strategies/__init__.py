"""The Python twins of the strategies' Lua, one module each, with every fact of a strategy
in its module: its arithmetic, its ``code`` in the specs and its ``STATE_FORMAT``.

Adding a strategy: its module here and its line in :data:`TWINS` (with its name in
:class:`~freqguard.rules.Strategy`), and its section in ``policy.lua`` with its line in the
Lua's ``TWINS``; ``tests/conformance/test_contract.py`` says what the Lua still lacks.
"""

from __future__ import annotations

from typing import cast

from freqguard.rules import Rule, Strategy
from freqguard.script.strategies import (
    calendar,
    fixed_window,
    gcra,
    quiet,
    sliding_log,
    token_bucket,
)
from freqguard.script.strategies.base import RuleParams, StateSpec, Twin

__all__ = [
    "KINDS",
    "SHORT_FORMATS",
    "STATE_FORMATS",
    "STRATEGY_CODES",
    "TWINS",
    "RuleParams",
    "StateSpec",
    "Twin",
    "twin_of",
]

#: The registry: each strategy's twin (one line each).
TWINS: dict[Strategy, Twin] = {
    Strategy.FIXED_WINDOW: cast(Twin, fixed_window),
    Strategy.SLIDING_LOG: cast(Twin, sliding_log),
    Strategy.TOKEN_BUCKET: cast(Twin, token_bucket),
    Strategy.GCRA: cast(Twin, gcra),
}

#: Every twin by its name: the strategies', and the calendar's (a calendar rule counts as
#: a fixed window does, over periods the specs name: ``Rule(..., calendar=True)``).
KINDS: dict[str, Twin] = {
    **{strategy.value: twin for strategy, twin in TWINS.items()},
    "calendar": cast(Twin, calendar),
    "quiet": cast(Twin, quiet),
}

#: Each twin's number in the specs, by its name (from its module).
STRATEGY_CODES = {name: twin.code for name, twin in KINDS.items()}

#: Each twin's packed state, by its name (from its module).
STATE_FORMATS = {name: twin.STATE_FORMAT for name, twin in KINDS.items()}
#: The short forms of the states that have one (base.SHORT_SPAN).
SHORT_FORMATS: dict[str, str] = {
    name: twin.SHORT_FORMAT for name, twin in KINDS.items() if hasattr(twin, "SHORT_FORMAT")
}


def twin_of(rule: Rule) -> Twin:
    """The twin that decides ``rule``."""
    if rule.quiet is not None:
        return KINDS["quiet"]
    return KINDS["calendar"] if rule.calendar else TWINS[rule.strategy]
