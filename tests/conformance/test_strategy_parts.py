"""What a strategy must provide, listed once: the test fails naming each part one lacks.

A strategy is its line in the registry (``freqguard.rules.Strategy``), its Python module and
its Lua file beside each other in ``freqguard/script/strategies/`` (both named after it:
``token-bucket``, ``token_bucket.py``, ``token_bucket.lua``), its page under
``docs/strategies/`` and its model in ``tests/reference.py``. The rest follows from those:
``scripts/lua_contract.py`` writes its code, formats and registry entry into the Lua,
``freqguard/script/library.py`` joins its file, the configuration schema lists its word.
The calendar's and the quiet hours' twins (``strategies.OTHER_KINDS``) name no strategy
users write: they provide the same twin parts, without a registry line, a page or a model.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from datetime import timedelta
from importlib import import_module
from pathlib import Path
from types import ModuleType

import pytest

from freqguard import ConfigError, Rate, Rule, Strategy
from freqguard.script import contract, library
from freqguard.script.strategies import KINDS, OTHER_KINDS, TWINS, module_name
from tests.reference import NotModeled, RefRule

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: what the Python twin has besides contract.TWIN_FUNCTIONS: the client's (strategies/base.py)
CLIENT_FUNCTIONS = ("decode", "mark", "report", "horizon")
#: each module's constants (``SHORT_FORMAT``, ``BOUNDS`` and ``OUTSIDE`` are optional)
CONSTANTS = ("code", "STATE_FORMAT")


def out_of_order(found: Sequence[str], wanted: Sequence[str], where: str) -> list[str]:
    """The functions of ``wanted`` that ``found`` lacks, or else how its order differs."""
    lacking = [f for f in wanted if f not in found]
    if lacking:
        return [f"{where} lacks {', '.join(lacking)} (contract.TWIN_FUNCTIONS)"]
    ordered = [f for f in found if f in wanted]
    if ordered != list(wanted):
        return [f"{where} defines {', '.join(ordered)}; in the contract's order: {wanted}"]
    return []


def _registry(kind: str) -> list[str]:
    member = next((s for s in Strategy if s.value == kind), None)
    if member is None:
        return [f"{kind}: no line in freqguard.strategy.Strategy (its word, short name, facts)"]
    shared = [s.value for s in Strategy if s is not member and s.short == member.short]
    return [f"{kind}: its short name {member.short!r} is also {shared}'s"] if shared else []


def _module(kind: str) -> tuple[ModuleType | None, list[str]]:
    name = module_name(kind)
    try:
        return import_module(f"freqguard.script.strategies.{name}"), []
    except ModuleNotFoundError:
        return None, [f"{kind}: no module freqguard/script/strategies/{name}.py"]


def _python(kind: str, module: ModuleType) -> list[str]:
    where = f"freqguard/script/strategies/{module_name(kind)}.py"
    out = [f"{where} lacks its {c}" for c in CONSTANTS if not hasattr(module, c)]
    for fmt in ("STATE_FORMAT", "SHORT_FORMAT"):
        try:
            contract.widths(getattr(module, fmt, ">"))
        except ValueError as exc:
            out.append(f"{where}: {fmt} {exc}")
    codes = {k: getattr(t, "code", None) for k, t in KINDS.items() if k != kind}
    if getattr(module, "code", None) in codes.values():
        out.append(f"{where}: code {module.code} is another twin's ({codes})")
    functions = [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
    ]
    out += out_of_order(functions, contract.TWIN_FUNCTIONS, where)
    out += [f"{where} lacks {f} (the client's)" for f in CLIENT_FUNCTIONS if f not in functions]
    if kind not in KINDS:
        out.append(f"{kind}: not among the registry's twins (strategies.KINDS)")
    return out


def _lua(kind: str) -> list[str]:
    name = module_name(kind)
    path = f"strategies/{name}.lua"
    try:
        text = library.read(path)
    except FileNotFoundError:
        return [f"{kind}: no Lua file freqguard/script/{path}"]
    found = re.findall(rf"^function {name}\.(\w+)\(", text, re.M)
    out = out_of_order(found, contract.TWIN_FUNCTIONS, f"freqguard/script/{path}")
    if path not in library.MANIFEST:
        out.append(f"{path} is not joined into the library (script/library.py MANIFEST)")
    if not re.search(rf"^local {name} = {{code = ", library.read("lua/contract.lua"), re.M):
        out.append(f"lua/contract.lua has no table {name}: run python scripts/lua_contract.py")
    return out


def _docs(kind: str) -> list[str]:
    out = []
    if not (DOCS / "strategies" / f"{kind}.md").exists():
        out.append(f"{kind}: no page docs/strategies/{kind}.md")
    if f"(strategies/{kind}.md)" not in (DOCS / "strategies.md").read_text(encoding="utf-8"):
        out.append(f"{kind}: no row in docs/strategies.md's table linking its page")
    return out


def _reference(kind: str) -> list[str]:
    try:
        RefRule(Rule(Rate(3, timedelta(minutes=1)), strategy=kind))
    except (NotModeled, ConfigError) as exc:
        return [f"{kind}: tests/reference.py has no model ({exc})"]
    return []


def missing_parts(kind: str) -> list[str]:
    """Every part ``kind`` lacks, each named; a strategy's (not ``OTHER_KINDS``) include
    its registry line, docs page and reference model."""
    strategy = kind not in OTHER_KINDS
    out = _registry(kind) + _docs(kind) if strategy else []
    module, lacking = _module(kind)
    out += lacking if module is None else _python(kind, module)
    out += _lua(kind)
    if strategy and not _registry(kind):
        out += _reference(kind)
        twin = TWINS[Strategy(kind)]
        if twin is not module:
            out.append(f"{kind}: the registry's twin is {twin}, not its module")
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_twin_has_all_its_parts(kind: str) -> None:
    assert missing_parts(kind) == []


def test_every_strategy_users_name_is_a_twin_and_the_others_are_not() -> None:
    assert list(KINDS) == [*(s.value for s in Strategy), *OTHER_KINDS]


def test_a_strategy_without_its_parts_is_told_each_one() -> None:
    """A new word with nothing behind it: every part is named, none guessed."""
    found = "\n".join(missing_parts("leaky-bucket"))
    for part in (
        "no line in freqguard.strategy.Strategy",
        "no page docs/strategies/leaky-bucket.md",
        "no row in docs/strategies.md",
        "no module freqguard/script/strategies/leaky_bucket.py",
        "no Lua file freqguard/script/strategies/leaky_bucket.lua",
    ):
        assert part in found


def test_twin_functions_out_of_order_or_missing_are_named() -> None:
    wanted = contract.TWIN_FUNCTIONS
    assert out_of_order(list(wanted), wanted, "x") == []
    assert out_of_order(["load", "helper", *wanted[1:]], wanted, "x") == []
    (swapped,) = out_of_order([wanted[1], wanted[0], *wanted[2:]], wanted, "x.lua")
    assert swapped.startswith(f"x.lua defines {wanted[1]}, {wanted[0]}")
    (lacking,) = out_of_order(wanted[:-1], wanted, "x.py")
    assert lacking == f"x.py lacks {wanted[-1]} (contract.TWIN_FUNCTIONS)"


def test_the_reference_refuses_a_rule_it_does_not_model() -> None:
    """Never a guess: a calendar rule (counted per calendar period) and a strategy the
    reference has no model for are refused, naming what is modeled."""
    with pytest.raises(NotModeled, match="calendar"):
        RefRule(Rule("3/day", by="a", calendar=True, tz="UTC"))
    rule = Rule("3/minute")
    object.__setattr__(rule, "strategy", "leaky-bucket")  # a member the reference lacks
    with pytest.raises(NotModeled, match=r"no leaky-bucket rule.*modeled: sliding-log"):
        RefRule(rule)
