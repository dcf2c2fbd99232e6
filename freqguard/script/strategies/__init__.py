"""The Python twins of the strategies' Lua, one module each, with every fact of a strategy
in its module: its arithmetic, its ``code`` in the specs and its ``STATE_FORMAT``.

The registry is :class:`~freqguard.rules.Strategy`: each member's twin is the module named
after it (``Strategy.GCRA``: ``gcra.py``), beside its Lua twin (``gcra.lua``, whose table
has the same name). Adding a strategy: its line in ``Strategy``, its module and Lua file
here, its docs page; ``scripts/lua_contract.py`` then writes its code and formats into the
Lua, and ``tests/conformance/test_strategy_parts.py`` names what is still missing.
"""

from __future__ import annotations

from importlib import import_module
from typing import cast

from freqguard.rules import Rule, Strategy
from freqguard.script.strategies.base import RuleParams, StateSpec, Twin

__all__ = [
    "KINDS",
    "MODULE_NAMES",
    "OTHER_KINDS",
    "SHORT_FORMATS",
    "STATE_FORMATS",
    "STRATEGY_CODES",
    "TWINS",
    "RuleParams",
    "StateSpec",
    "Twin",
    "module_name",
    "twin_of",
]


def module_name(kind: str) -> str:
    """The name of a twin's module, Lua file and Lua table: ``"token-bucket"`` is
    ``token_bucket`` (``token_bucket.py``, ``token_bucket.lua``, the Lua's ``token_bucket``)."""
    return kind.replace("-", "_")


def _twin(kind: str) -> Twin:
    return cast(Twin, import_module(f"{__name__}.{module_name(kind)}"))


#: Each strategy's twin, found by its name.
TWINS: dict[Strategy, Twin] = {strategy: _twin(strategy.value) for strategy in Strategy}

#: The twins that are no strategy users name: the calendar's (a calendar rule counts as a
#: fixed window does, over periods the specs name: ``Rule(..., calendar=True)``) and the
#: quiet hours' (``Policy(..., quiet=...)``); :func:`twin_of` says which a rule takes.
OTHER_KINDS = ("calendar", "quiet")

#: Every twin by its name: the strategies', then the others.
KINDS: dict[str, Twin] = {
    **{strategy.value: twin for strategy, twin in TWINS.items()},
    **{kind: _twin(kind) for kind in OTHER_KINDS},
}

#: Each twin's module (and Lua file and table) name, by its name.
MODULE_NAMES = {kind: module_name(kind) for kind in KINDS}

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
