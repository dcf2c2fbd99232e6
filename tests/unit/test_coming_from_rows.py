"""docs/coming-from/slowapi.md read by a slowapi user porting an app: a row that, read
with the row beside it, leaves an idiom without its way."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "coming-from" / "slowapi.md"


def _row(start: str) -> str:
    [row] = [line for line in PAGE.read_text().splitlines() if line.startswith(start)]
    return row


def test_slowapis_exempt_under_default_limits_has_its_way() -> None:
    """A slowapi app has ``default_limits=["2/minute"]`` and ``@limiter.exempt`` on
    ``/health`` (the usual pair). flask-limiter.md:62 ports the default limits to a
    catch-all, ``Limit("/{rest:path}", "2/minute", key=...)``, "last in the list"; md:59
    ports ``@limiter.exempt`` to "a path no ``Limit`` matches", "the same". Under that
    catch-all every path matches, so the exempt row has nothing to offer: ``Limit("/health",
    None)`` is refused ("takes a rate string ..."), ``Limit(..., exempt=True)`` is a bare
    TypeError, and the way that exists (a key function raising ``SkipRequest`` for the path,
    integrations.md:252-254) is not named in either row. Expected: the exempt row names it
    (``SkipRequest``)."""
    row = _row("| `@limiter.exempt` | a path no `Limit` matches")
    assert "SkipRequest" in row, row
