"""What the contract's tests share (``test_contract.py``, ``test_contract_formats.py``):
the library's Lua files, by their paths under ``freqguard/script``, and one of
``lua/`` by its name."""

from __future__ import annotations

from freqguard.script import library

#: every Lua file of the library, by its path under freqguard/script, in the joined order
FILES = {path: library.read(path) for path in (*library.MANIFEST, library.FUNCTION_TAIL)}


def _file(name: str) -> str:
    return FILES[f"lua/{name}.lua"]
