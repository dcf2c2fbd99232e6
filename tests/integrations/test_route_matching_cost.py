"""A Limit's pattern is matched against every request's path before the app sees it: a
path failing it must cost time linear in its length, never the regex's backtracking over
parameters that share a segment (``/{a}-{b}-{c}.txt`` against 8,000 ``-`` and a ``/x``:
minutes a request). ``PathPattern`` walks such a pattern's built-in convertors itself; it
answers exactly as the regex does (a differential over drawn patterns and paths, the
convertors' values and noise)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard.integrations._routes import PathPattern, pattern_regex, walk, walked
from tests.conftest import examples


class _Untouched:
    """A regex that must not be asked."""

    groups = 3

    def match(self, path: str) -> None:
        raise AssertionError(f"the regex was asked about a path of {len(path)} characters")


def test_paths_that_cannot_match_never_reach_the_backtracking_regex() -> None:
    pattern = PathPattern("/files/{a}-{b}-{c}.txt")
    pattern.regex = _Untouched()  # type: ignore[assignment]
    hostile = "-" * 100_000
    for path in (
        f"/files/{hostile}/x",  # one segment too many
        f"/files/{hostile}",  # not ending in .txt
        f"/other/{hostile}.txt",  # not starting with /files/
        f"/files/{hostile}/.txt",
    ):
        assert pattern.match(path) is None


def test_a_path_that_matches_still_matches_as_starlette_splits_it() -> None:
    pattern = PathPattern("/files/{a}-{b}-{c}.txt")
    found = pattern.match("/files/x-y-z-w.txt")
    assert found == {"a": "x-y", "b": "z", "c": "w"}
    newline = pattern.match("/files/x-y-z.txt\n")  # "$" lets a final newline through
    assert newline == {"a": "x", "b": "y", "c": "z"}


_UUID = "f0e1d2c3-b4a5-4968-8778-695a4b3c2d1e"
_LITERALS = st.sampled_from(["/", "-", ".", "/a", "a", "/x/", ".txt", "/v1/", "~", "b-"])
_CONVERTORS = st.sampled_from(["", ":int", ":path", ":float", ":str", ":uuid"])


@st.composite
def _patterns(draw: st.DrawFn) -> str:
    pieces = ["/"]
    for index in range(draw(st.integers(0, 3))):
        pieces.append(f"{{p{index}{draw(_CONVERTORS)}}}")
        pieces.append(draw(_LITERALS))
    return "".join(pieces).replace("}{", "}-{")


_PIECES = st.sampled_from(
    ["/", "-", ".", "a", "1", "x", "/x", ".txt", "\n", "9.5", "b-", "//", "12.", ".3", _UUID]
)


@settings(max_examples=examples(300), deadline=None)
@given(pattern=_patterns(), pieces=st.lists(_PIECES, max_size=12), prefix=st.booleans())
def test_the_checks_answer_as_the_regex_does(pattern: str, pieces: list[str], prefix: bool) -> None:
    """Paths drawn from the pattern's own pieces (and noise), so that many match."""
    literals = [p for p in re.split(r"{[^}]*}", pattern) if p]
    path = "".join(pieces)
    if prefix and literals:
        path = literals[0] + path + literals[-1]
    expected = pattern_regex(pattern).match(path)
    groups = None if expected is None else expected.groupdict()
    assert PathPattern(pattern).match(path) == groups
    elements = walked(pattern)  # the walk on every pattern, those the regex takes too
    assert elements is not None
    assert walk(path, elements) == groups
