"""A griffe extension for the documentation site: the docstrings' reST idioms as Markdown.

freqguard's docstrings are Google style with Sphinx cross-reference roles
(``:class:`~freqguard.Guard```) and ``::`` literal blocks, which read well in the source and
under ``help()``. mkdocstrings renders docstrings as Markdown, where both would show as
punctuation. This turns each role into an optional autorefs link (a link when the target
is on the site, plain code when it is not: a private helper, a constant) and each ``::``
block into a fenced Python block, when griffe loads the package for ``mkdocs build``.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


def _identifier(obj: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` as seen from ``obj``, or None when it cannot be found."""
    if target.startswith("freqguard"):
        return target
    head, _, rest = target.partition(".")
    try:
        found = obj.resolve(head)
    except (griffe.NameResolutionError, griffe.AliasResolutionError):
        return None
    return f"{found}.{rest}" if rest else found


def roles_to_links(text: str, obj: griffe.Object) -> str:
    """Replace every Sphinx role in ``text`` by an optional autorefs link."""

    def link(match: re.Match[str]) -> str:
        target = match["target"].strip()
        title = target.rpartition(".")[2] if match["tilde"] else target
        identifier = _identifier(obj, target)
        if identifier is None:
            return f"`{title}`"
        return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

    return ROLE.sub(link, text)


def literal_blocks(text: str) -> str:
    """Turn reST ``::`` literal blocks (a paragraph ending in ``::``) into fenced blocks."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        lead = line.rstrip()[:-2].rstrip()
        if lead:
            out.append(lead + ":")
        indent = len(line) - len(line.lstrip())
        block: list[str] = []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            block.append(lines[i])
            i += 1
        code = textwrap.dedent("\n".join(block)).strip("\n")
        pad = " " * indent
        out += ["", f"{pad}```python", *(pad + c if c else c for c in code.split("\n"))]
        out += [f"{pad}```", ""]
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrite each docstring once the package is loaded (so names resolve)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            value = literal_blocks(obj.docstring.value)
            obj.docstring.value = roles_to_links(value, obj)
