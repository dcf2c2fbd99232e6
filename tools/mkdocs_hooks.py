"""mkdocs hooks: the files at the repository's root on the site, with links that work in both.

The changelog, the contributors' guide and the benchmarks' README live outside ``docs/``,
where GitHub readers and the sdist find them. Their page under ``docs/`` (``changelog.md``
...) holds one line, ``<!-- include: ../CHANGELOG.md -->``, and a link for readers on GitHub;
on the site the page shows the file itself. Links are written for GitHub, relative to the
file they are in; a link from any page to one of these files is pointed at its page on the
site, and a link inside an included file is made relative to the page that shows it. Any
other link outside ``docs/`` is left alone, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.M)
# an inline link's target, or a reference definition's: [text](target "title"), [id]: target
LINK = re.compile(r"(?P<head>\]\(|^\[[^\]]+\]:\s*)(?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def _pages() -> dict[str, str]:
    """Each included file (a path from the root) and the docs page that shows it."""
    pages = {}
    for page in (ROOT / "docs").rglob("*.md"):
        found = INCLUDE.search(page.read_text())
        if found:
            source = posixpath.normpath(posixpath.join(_rel(page.parent), found["path"]))
            pages[source] = _rel(page)
    return pages


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def relink(markdown: str, written_in: str, shown_in: str, pages: dict[str, str]) -> str:
    """Rewrite the relative links of ``markdown``, written in the file ``written_in`` and
    shown on the docs page ``shown_in`` (paths from the root), for the site."""
    here = posixpath.dirname(shown_in)

    def fix(match: re.Match[str]) -> str:
        target = match["target"]
        if EXTERNAL.match(target) or target.startswith("/"):
            return match[0]
        path = posixpath.normpath(posixpath.join(posixpath.dirname(written_in), target))
        path = pages.get(path, path)
        if not path.startswith("docs/"):
            return match[0]  # outside the site: mkdocs reports it
        return match["head"] + posixpath.relpath(path, here) + (match["anchor"] or "")

    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(fix, line))
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Show an included file on its page, and point links at the site's pages."""
    shown_in = "docs/" + page.file.src_uri
    pages = _pages()
    found = INCLUDE.search(markdown)
    if found is None:
        return relink(markdown, shown_in, shown_in, pages)
    source = posixpath.normpath(posixpath.join(posixpath.dirname(shown_in), found["path"]))
    return relink((ROOT / source).read_text(), source, shown_in, pages)
