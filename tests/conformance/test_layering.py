"""The package's rooms and which may import which, no import cycle anywhere, and no file
grown past 400 lines.

Every import counts, a deferred one (inside a function) included; only those under
``if TYPE_CHECKING:`` (never run) do not. A room may import its own modules and those of
the rooms it lists; ``docs/architecture.md`` draws the same picture.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "freqguard"

#: room -> its modules (a dotted prefix; the longest match wins)
ROOMS: dict[str, tuple[str, ...]] = {
    "vocabulary": (
        "freqguard.errors",
        "freqguard.clock",
        "freqguard.bounds",
        "freqguard.rates",
        "freqguard.options",
        "freqguard.strategy",
        "freqguard.rules",
        "freqguard.policy",
    ),
    "script": ("freqguard.script",),
    "results": ("freqguard.decision", "freqguard.headers"),
    "observe": ("freqguard.observe",),
    "backends": ("freqguard.backends",),
    "engine": ("freqguard.engine", "freqguard.failure", "freqguard.denycache"),
    "guards": ("freqguard._async", "freqguard._sync", "freqguard.guard"),
    "decorators": ("freqguard.decorators",),
    "config": ("freqguard.config",),
    "integrations": ("freqguard.integrations",),
    "app": (
        "freqguard.__init__",
        "freqguard.__main__",
        "freqguard.cli",
        "freqguard.demo",
        "freqguard.service",
    ),
}

#: room -> the rooms it may import
MAY_IMPORT: dict[str, set[str]] = {
    "vocabulary": set(),
    "script": {"vocabulary"},
    "results": {"vocabulary", "script"},
    "observe": {"vocabulary", "script", "results"},
    "backends": {"vocabulary", "script"},
    "engine": {"vocabulary", "script", "results", "observe"},
    "guards": {"vocabulary", "script", "results", "observe", "backends", "engine"},
    "decorators": {"vocabulary", "script", "results", "backends", "engine", "guards"},
    "config": {"vocabulary", "results", "observe", "backends", "engine", "guards"},
    "integrations": {
        "vocabulary",
        "results",
        "backends",
        "engine",
        "guards",
        "decorators",
        "config",
    },
    "app": set(ROOMS),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 2:
        parts = parts[:-1]
    return ".".join(parts)


def room_of(module: str) -> str:
    best, room = -1, ""
    for name, prefixes in ROOMS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, room = len(prefix), name
    assert room, f"{module} is in no room: add it to ROOMS"
    return room


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports when it runs (any depth, deferred too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            module = node.module or ""
            if node.level:  # relative: from the importing module's package, up level - 1
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = ".".join(package[: len(package) - (node.level - 1)])
                module = f"{base}.{module}" if module else base
            found.add(module)
            # "from freqguard.x import y": y may be a module of its own
            found.update(f"{module}.{alias.name}" for alias in node.names)
    own = module_name(path)
    return {name for name in found if name in modules and name != own}


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths) | {"freqguard"}
    edges = {name: imports_of(path, modules) for name, path in paths.items()}
    # importing the package's face runs nothing of a module's own room: not an edge
    return {name: {m for m in targets if m != "freqguard"} for name, targets in edges.items()}


def test_every_module_is_in_a_room_and_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for module, targets in sorted(graph().items()):
        room = room_of(module)
        for target in sorted(targets):
            other = room_of(target)
            if other != room and other not in MAY_IMPORT[room]:
                wrong.append(f"{module} ({room}) imports {target} ({other})")
    assert wrong == []


def test_no_import_cycle_deferred_imports_included() -> None:
    edges = graph()
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert cycles == []


def test_the_top_level_keeps_the_users_vocabulary() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 16, top


def test_no_hand_written_module_is_over_400_lines() -> None:
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if not text.startswith("# Generated by") and text.count("\n") > 400:
            long.append(f"{path.relative_to(PACKAGE)}: {text.count(chr(10))}")
    assert long == []


def test_no_lua_file_is_over_400_lines() -> None:
    """The Lua twin too, generated or not: a file per strategy beside its module, one per
    shared part (freqguard/script/library.py joins them)."""
    files = list(PACKAGE.rglob("*.lua"))
    assert len(files) > 10
    long = [
        f"{path.relative_to(PACKAGE)}: {lines}"
        for path in files
        if (lines := path.read_text(encoding="utf-8").count("\n")) > 400
    ]
    assert long == []
