"""The policy name a decorated function (or a Flask view) gets when none is given."""

from __future__ import annotations

import threading
from collections.abc import Callable

from freqguard.rules import fit_name

__all__ = ["implicit_name"]

_taken: set[str] = set()  # implicit policy names handed out in this process
_taken_lock = threading.Lock()


def implicit_name(func: Callable[..., object], prefix: str = "capped") -> str:
    """A policy name of its own for ``func``: ``<prefix>.<module>.<qualname>``.

    Numbered (``.2``, ``.3``, ...) in decoration order when another function of this
    process has the name already (functions made by a factory share a qualname), so no two
    functions ever share a cap by accident. A module-level function keeps the plain name in
    every process; give factory-made ones ``name=`` when processes must share their caps.
    """
    raw = f"{prefix}.{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
    with _taken_lock:
        name, number = fit_name(raw), 1
        while name in _taken:
            number += 1
            name = fit_name(f"{raw}.{number}")
        _taken.add(name)
    return name
