"""The Lua twin is held to ``freqguard/contract.py``, and the Python twin to it too, both ways:
constants, strategy codes, and the twin functions of every strategy (same names, same order)."""

from __future__ import annotations

import inspect
import re
from importlib import resources
from types import ModuleType

import pytest

from freqguard import contract
from freqguard.strategies import TWINS

LUA = resources.files("freqguard.lua").joinpath("policy.lua").read_text(encoding="utf-8")


def _lua_local(name: str) -> str:
    found = re.search(rf"^\s*local {name} = (.+?)\s*(?:--.*)?$", LUA, re.M)
    assert found, f"policy.lua has no `local {name} = ...`"
    return found.group(1)


def test_the_lua_modes_are_the_contracts() -> None:
    found = re.search(r"local HIT, CHECK, REFUND, RESET = (\d+), (\d+), (\d+), (\d+)", LUA)
    assert found
    assert tuple(map(int, found.groups())) == (
        contract.HIT,
        contract.CHECK,
        contract.REFUND,
        contract.RESET,
    )


@pytest.mark.parametrize(
    ("lua", "value"),
    [
        ("STALE_GRACE", contract.STALE_GRACE_US),
        ("PINNED_GRACE_MS", contract.PINNED_GRACE_MS),
        ("PRUNE_FLOOR", contract.PRUNE_FLOOR),
        ("BACK_LIMIT", contract.BACK_LIMIT),
    ],
)
def test_the_lua_constants_are_the_contracts(lua: str, value: int) -> None:
    text = _lua_local(lua).replace("^", "**")
    assert re.fullmatch(r"[\d *]+", text), text
    assert eval(text) == value  # digits, spaces and ** only, checked above


def _lua_twins() -> list[str]:
    table = _lua_local("TWINS")
    return [name.strip() for name in table.strip("{}").split(",")]


def test_the_lua_strategy_table_follows_the_codes() -> None:
    by_code = sorted(contract.STRATEGY_CODES, key=contract.STRATEGY_CODES.__getitem__)
    assert _lua_twins() == [name.replace("-", "_") for name in by_code]
    assert list(contract.STRATEGY_CODES.values()) == list(range(1, len(by_code) + 1))


def _python_functions(module: ModuleType) -> list[str]:
    return [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
    ]


@pytest.mark.parametrize("strategy", list(TWINS), ids=lambda s: s.value)
def test_every_twin_function_exists_on_both_sides_in_the_same_order(strategy: object) -> None:
    twin = TWINS[strategy]  # type: ignore[index]
    module = inspect.getmodule(twin.load)
    assert module is not None
    assert twin.code == contract.STRATEGY_CODES[strategy.value]  # type: ignore[attr-defined]
    lua_name = strategy.value.replace("-", "_")  # type: ignore[attr-defined]
    lua = re.findall(rf"^\s*function {lua_name}\.(\w+)\(", LUA, re.M)
    python = [f for f in _python_functions(module) if f in contract.TWIN_FUNCTIONS]
    assert lua == list(contract.TWIN_FUNCTIONS), "every Lua twin function is in the contract"
    assert python == list(contract.TWIN_FUNCTIONS), "every contract function has a Python twin"
