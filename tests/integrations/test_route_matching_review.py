"""Review of e61cc65 (``PathPattern``: a path failed in one pass before the regex): hostile
paths that pass the start, end and ``/`` checks and still fail, so reach the backtracking
regex; and a WSGI path that is not ASCII (from before the commit: PATH_INFO is bytes as
latin-1, the pattern is text)."""

from __future__ import annotations

from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.integrations._routes import PathPattern, pattern_regex
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from freqguard.integrations.wsgi import Limit as WSGILimit

_LONG = 100_000


class _Untouched:
    """A regex that must not be asked (as in test_route_matching_cost.py)."""

    groups = 4

    def match(self, path: str) -> None:
        raise AssertionError(f"the regex was asked about a path of {len(path)} characters")


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        # the pattern ends in a parameter: its last literal is "", which every path ends
        # with; the slashes agree; no '.' anywhere. 1,000 '-' cost 1.2 s, 8,000 minutes.
        ("/files/{a}-{b}-{c}.{ext}", "/files/" + "-" * _LONG),
        # a narrower convertor last: the slashes and the ends agree, the 'x' is no int
        # (1,000 '-' cost 2.4 s)
        ("/files/{a}-{b}-{c}-{n:int}", "/files/" + "-" * _LONG + "x"),
        # '.*' (path) takes no newline (a %0A in the URL): the ends agree, no '/' count
        # (1,000 '-' cost 1.2 s)
        ("/f/{a:path}-{b:path}-{c:path}.txt", "/f/" + "-" * _LONG + "\n.txt"),
    ],
    ids=["ends-in-a-parameter", "int-last", "newline-in-a-path-parameter"],
)
def test_a_hostile_path_that_passes_the_checks_never_reaches_the_backtracking_regex(
    pattern: str, path: str
) -> None:
    """The commit's claim: a hostile long path that fails never reaches the regex, whose
    backtracking over parameters sharing a segment grows as a power of the path's length.
    These fail (the real regex says so on a short one) yet pass every check before it."""
    assert pattern_regex(pattern).match(path[:7] + path[-40:]) is None  # they do fail
    guarded = PathPattern(pattern)
    guarded.regex = _Untouched()  # type: ignore[assignment]
    assert guarded.match(path) is None


def test_a_wsgi_limit_of_a_non_ascii_path_matches_its_requests() -> None:
    """PEP 3333: PATH_INFO is the path's bytes decoded as latin-1, so a request to
    ``/café/1`` arrives as ``/cafÃ©/1``; the pattern ``/café/{item}`` is text and never
    matches it: 1/minute admits every request (the ASGI middleware, given the decoded
    path, caps them). werkzeug decodes PATH_INFO back to UTF-8 before routing."""
    from wsgiref.util import setup_testing_defaults

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(1000))
    limited = WSGIMiddleware(app, guard=guard, limits=[WSGILimit("/café/{item}", "1/minute")])
    statuses: list[str] = []
    for _ in range(3):
        environ: dict[str, Any] = {"PATH_INFO": "/café/1".encode().decode("latin-1")}
        setup_testing_defaults(environ)
        limited(environ, lambda status, headers, *_: statuses.append(status))
    assert [int(status[:3]) for status in statuses] == [200, 429, 429]
