"""docs/architecture.md maps every folder under ``freqguard/`` and every module in it, and
lists the project's vocabulary: a new folder or module is named there, or this fails."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "freqguard"
PAGE = ROOT / "docs" / "architecture.md"


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found is not None, f"docs/architecture.md has no '## {title}' section"
    return found.group(1)


def _rows(section: str) -> dict[str, set[str]]:
    """Each table row's first cell (a folder in backticks), and the names in backticks in
    the rest of its row."""
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = line.split("|")
        head = re.fullmatch(r"\s*`([^`]+)`\s*", cells[1]) if len(cells) > 2 else None
        if head is not None:
            rows[head.group(1)] = set(re.findall(r"`([^`]+)`", "|".join(cells[2:])))
    return rows


def _folders() -> list[Path]:
    found = [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
    return sorted(p for p in found if p.name != "__pycache__")


def _named(folder: Path) -> str:
    """A folder as the map names it: ``freqguard/`` for the package, else relative to it."""
    return "freqguard/" if folder == PACKAGE else f"{folder.relative_to(PACKAGE).as_posix()}/"


def _modules(folder: Path) -> list[str]:
    """A folder's modules as the map names them: a Python module by its name, a Lua file by
    its file name; ``__init__.py`` (its folder's face) and data files aside."""
    names = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    return sorted(names + [p.name for p in folder.glob("*.lua")])


def test_every_folder_and_module_is_on_the_map() -> None:
    rows = _rows(_section("The map"))
    missing = [
        f"{_named(folder)}{module}"
        for folder in _folders()
        for module in (_modules(folder) if _named(folder) in rows else ["(the folder)"])
        if module not in rows.get(_named(folder), set())
    ]
    assert not missing, f"docs/architecture.md 'The map' lacks: {', '.join(missing)}"


def test_the_map_names_no_folder_or_lua_file_that_is_gone() -> None:
    on_disk = {_named(folder): set(_modules(folder)) for folder in _folders()}
    for folder, names in _rows(_section("The map")).items():
        assert folder in on_disk, f"the map names a folder that is gone: {folder}"
        stale = {n for n in names if n.endswith(".lua")} - on_disk[folder]
        assert not stale, f"the map names Lua files gone from {folder}: {sorted(stale)}"


def test_each_word_of_the_vocabulary_has_one_row() -> None:
    words = [
        re.split(r"\s*\|\s*", line.strip("| "))[0]
        for line in _section("Vocabulary").splitlines()
        if line.startswith("| ") and not line.startswith("| Word") and "---" not in line
    ]
    assert len(words) == len(set(words)), words
    for word in ("bin", "bucket", "part", "slot", "twin", "mark", "`Limit`", "sync copy"):
        assert word in words, word
