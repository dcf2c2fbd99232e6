"""How deeply a JSON text nests arrays and objects, found without parsing it.

A parser finds out by recursing, and stops where the interpreter's stack runs out: a depth
that moves with whoever called it (the service's bodies answered differently through two
routes of different stack depth). Each reader of untrusted JSON (the service's bodies,
the replay's lines) refuses a text nested past its bound with this check first, so the
answer is the same wherever it is asked, and costs little: a text with fewer opening
brackets than the bound is never scanned, and a scan is a few passes of C over its bytes.
"""

from __future__ import annotations

import re

__all__ = ["deeper_than"]

#: A JSON string (its brackets are text, not nesting); one never closed is text to the end
#: (a parser reads it so, then refuses it).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?$)')
_PAIRS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def deeper_than(text: bytes | str, most: int) -> bool:
    """Whether ``text`` nests arrays and objects more than ``most`` levels deep (brackets
    inside strings not counted). A bracket opened and never closed is a level too: a
    recursive parser goes down it before it finds the text malformed (exact for every
    balanced text; for one that is not, it may count levels side by side as nested)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= most:  # every real body and line: no scan
        return False
    nesting = _STRING.sub(b"", data).translate(_PAIRS, _NOT_BRACKETS)
    for peeled_levels in range(most):  # each pass takes off the innermost level
        peeled = nesting.replace(b"()", b"")
        if len(peeled) == len(nesting):  # nothing left that pairs up: opens never closed
            return peeled_levels + nesting.count(b"(") > most
        nesting = peeled
    return b"(" in nesting
