"""The sync Redis edge is generated from the async one (scripts/unasync.py): the generated
modules must be what the script writes today, and the check must catch one that is not."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "unasync.py"


def _unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_sync_modules_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_check_catches_a_stale_or_orphan_module(tmp_path: Path) -> None:
    unasync = _unasync()
    source, target = tmp_path / "_async", tmp_path / "_sync"
    shutil.copytree(unasync.SOURCE, source)
    shutil.copytree(unasync.TARGET, target)
    assert unasync.problems(source, target) == []
    wire = target / "wire.py"
    wire.write_text(wire.read_text().replace("def read(", "def read_all("))
    (target / "orphan.py").write_text("")
    found = unasync.problems(source, target)
    assert len(found) == 2
    assert found[0].startswith(f"{wire} is stale")
    assert "+def read(" in found[0]
    assert "orphan.py has no source" in found[1]


def test_substitutions_are_whole_words() -> None:
    unasync = _unasync()
    used: set[int] = set()
    line = "    async def f(c: AsyncConnection) -> AsyncConnectionPool: await g(c)\n"
    assert unasync.twin(line, used) == "    def f(c: Connection) -> AsyncConnectionPool: g(c)\n"
