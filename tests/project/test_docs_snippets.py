"""Every ```python block of the Markdown docs (README.md, the other top-level *.md, docs/**.md)
runs.

The blocks of one file run in order in one namespace, as a reader reads them: a block may use
what an earlier block of its file defined. So each test runs the blocks before its own first,
then its own; a failure names the file and line in the Markdown.

Redis URLs in a block are pointed at the suite's own servers (never a shared 6379):
``redis://``/``rediss://`` at the standalone server, ``redis+cluster://``/``rediss+cluster://``
at the cluster (TLS dropped: the test servers do not speak it). A block the reader is not
meant to run carries, on the line right before it, ``<!-- snippet: skip <reason> -->``;
keep those rare.
"""

from __future__ import annotations

import asyncio
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from freqguard import AsyncGuard, Guard, configure

ROOT = Path(__file__).parent.parent.parent
DOCS = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md")])
BLOCK = re.compile(
    r"(?:<!-- snippet: (?P<directive>.*?) -->\n)?^```python\n(?P<code>.*?)^```", re.M | re.S
)
CLUSTER_URL = re.compile(r"rediss?\+cluster://[^\s\"'/]+")
REDIS_URL = re.compile(r"rediss?://[^\s\"'/]+")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the block's first line of code
    code: str
    skip: str | None  # the reason, for a skip directive

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _snippets(path: Path) -> list[Snippet]:
    text = path.read_text()
    found = []
    for match in BLOCK.finditer(text):
        directive = match["directive"]
        if directive is not None and not re.fullmatch(r"skip \S.*", directive):
            raise ValueError(
                f"{path}: unknown directive <!-- snippet: {directive} -->; use 'skip <reason>'"
            )
        line = text.count("\n", 0, match.start("code")) + 1
        skip = directive[len("skip ") :] if directive else None
        found.append(Snippet(path, line, match["code"], skip))
    return found


SNIPPETS = {path: _snippets(path) for path in DOCS}
ALL = [(path, n) for path, found in SNIPPETS.items() for n in range(len(found))]


def test_every_python_block_is_found() -> None:
    for path, found in SNIPPETS.items():
        fences = re.findall(r"^[ \t]*```[ \t]*python", path.read_text(), re.M)
        assert len(found) == len(fences), path  # none indented or mis-fenced, so missed
    assert len(ALL) >= 12
    # three, each run by a test of its own: the generated service client
    # (test_service_openapi.py), DRF (test_drf.py), arq (test_celery_queues.py)
    assert sum(s.skip is not None for found in SNIPPETS.values() for s in found) <= 3


def _pointed_at_the_suite(code: str, request: pytest.FixtureRequest) -> str:
    if CLUSTER_URL.search(code):
        node = request.getfixturevalue("redis_cluster")[0]
        code = CLUSTER_URL.sub(f"redis+cluster://127.0.0.1:{node.port}", code)
    if REDIS_URL.search(code):
        server = request.getfixturevalue("redis_server")
        code = REDIS_URL.sub(f"redis://127.0.0.1:{server.port}", code)
    return code


def _close(namespace: dict[str, object]) -> None:
    """Close what the snippets opened (a Redis client left open is a ResourceWarning)."""
    for value in namespace.values():
        if isinstance(value, Guard):
            value.close()
        elif isinstance(value, AsyncGuard):
            asyncio.run(value.aclose())


@pytest.mark.parametrize(("path", "index"), ALL, ids=[SNIPPETS[path][n].id for path, n in ALL])
def test_snippet_runs(path: Path, index: int, request: pytest.FixtureRequest) -> None:
    own = SNIPPETS[path][index]
    if own.skip:
        pytest.skip(own.skip)
    module = types.ModuleType("docs_snippet")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    try:
        for snippet in SNIPPETS[path][: index + 1]:
            if snippet.skip:
                continue
            code = _pointed_at_the_suite(snippet.code, request)
            # padded so that a traceback names the line in the Markdown file
            exec(compile("\n" * (snippet.line - 1) + code, str(path), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        _close(module.__dict__)
        configure()  # a snippet may configure the process-wide default guard
