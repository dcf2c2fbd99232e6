"""``tests/unit/`` does no I/O (shared/DESIGN.md's layout of the tests): no Redis server, no
process, no socket; what needs one lives in ``tests/backends``, ``tests/operations`` or
``tests/project``. Read from each test module's source, so a new one cannot slip in."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent.parent / "unit"
#: modules a unit test may not import: processes, sockets, servers, a Redis client (but
#: ``redis.crc``, a function: the slot of a key)
FORBIDDEN_IMPORTS = ("subprocess", "socket", "redis", "tests.servers", "uvicorn")
ALLOWED_IMPORTS = ("redis.crc",)
#: fixtures that start or reach a server (tests/conftest.py)
SERVER_FIXTURES = {
    "redis_server",
    "redis_cluster",
    "scripts_server",
    "scripts_cluster",
    "sentinel_group",
    "replicated_cluster",
    "redis_backend",
    "binned_backend",
    "cluster_backend",
    "scripts_backend",
    "scripts_cluster_backend",
    "any_store",
    "backend",
    "make_guard",
    "make_any_guard",
}


def _a_test(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A test, or a fixture: what pytest hands fixtures to."""
    fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
    return node.name.startswith("test") or fixture


def _io_in(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            if name in ALLOWED_IMPORTS:
                continue
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_IMPORTS):
                found.append(f"{path.name}:{getattr(node, 'lineno', 0)}: imports {name}")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _a_test(node):
            for arg in node.args.args:
                if arg.arg in SERVER_FIXTURES:
                    found.append(f"{path.name}:{node.lineno}: {node.name} takes {arg.arg}")
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "getfixturevalue"
            and any(isinstance(a, ast.Constant) and a.value in SERVER_FIXTURES for a in node.args)
        ):
            found.append(f"{path.name}:{node.lineno}: asks for a server fixture")
    return found


def test_unit_tests_start_no_server_process_or_socket() -> None:
    found = [line for path in sorted(UNIT.glob("test_*.py")) for line in _io_in(path)]
    assert found == []
