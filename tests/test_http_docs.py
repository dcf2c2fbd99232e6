"""The snippets docs/integrations.md marks ``<!-- runs -->`` run, each on its own."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from freqguard.decorators import configure

DOC = Path(__file__).parent.parent / "docs" / "integrations.md"
SNIPPETS = re.findall(r"<!-- runs -->\n```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_there_are_snippets() -> None:
    assert len(SNIPPETS) >= 5


@pytest.mark.parametrize("source", SNIPPETS, ids=[f"snippet-{n}" for n in range(len(SNIPPETS))])
def test_snippet_runs(source: str) -> None:
    module = types.ModuleType("docs_snippet")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        configure()  # a snippet may configure the process-wide default guard
