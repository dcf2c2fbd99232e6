"""``freqguard.E009``: DRF's throttle settings written where DRF does not read them.

DRF reads only the keys it knows, and only inside ``REST_FRAMEWORK``: a misspelt key
(``"DEFAULT_THROTTLE_CLASS"``), one written at the top of ``settings.py``, or a misspelt
``REST_FRAMEWORK`` itself throttles nothing, and no view says so. Each is an error naming
what DRF reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from django.conf import settings as django_settings
from django.core import checks

__all__ = ["setting_checks"]

#: DRF's settings that decide whether, and at what rate, a view is throttled.
THROTTLE_SETTINGS = ("DEFAULT_THROTTLE_CLASSES", "DEFAULT_THROTTLE_RATES", "NUM_PROXIES")
#: What each holds: a misspelt key is taken for the one whose kind its value is.
_KINDS: dict[str, type | tuple[type, ...]] = {
    "DEFAULT_THROTTLE_CLASSES": (list, tuple, str),
    "DEFAULT_THROTTLE_RATES": Mapping,
    "NUM_PROXIES": (int, type(None)),
}
_REST = "REST_FRAMEWORK"
_UNREAD = "DRF does not read it, so what it holds applies to no view"


def setting_checks() -> list[checks.CheckMessage]:
    """The errors (``freqguard.E009``) for DRF's throttle settings DRF does not read: a
    ``REST_FRAMEWORK`` key it does not know resembling one of its throttle settings, one
    of them written outside ``REST_FRAMEWORK``, and a setting resembling ``REST_FRAMEWORK``
    that holds one. None without DRF installed."""
    try:
        from rest_framework.settings import DEFAULTS
    except ImportError:  # no DRF: its settings mean nothing
        return []
    names = [name for name in dir(django_settings) if name.isupper()]
    found: list[checks.CheckMessage] = [
        _error(text) for text in _misspelt_keys(getattr(django_settings, _REST, None), DEFAULTS)
    ]
    for name in names:
        if name in THROTTLE_SETTINGS[:2]:  # NUM_PROXIES is a common name of a project's own
            found.append(
                _error(
                    f"{name} is read by DRF inside {_REST} only: {_UNREAD}; "
                    f"move it to {_REST}[{name!r}]"
                )
            )
        meant = difflib.get_close_matches(name, [_REST], n=1, cutoff=0.8)
        if name == _REST or not meant:  # read no other setting: a deprecated one warns
            continue  # when read (Django 4.2's DEFAULT_FILE_STORAGE)
        value = getattr(django_settings, name, None)
        if isinstance(value, Mapping) and _throttles(value):
            found.append(_error(f"{name}: did you mean {_REST!r}? {_UNREAD}"))
    return found


def _misspelt_keys(rest: object, known: Iterable[str]) -> list[str]:
    """For each key of ``rest`` DRF does not know that resembles a throttle setting, its
    message."""
    if not isinstance(rest, Mapping):
        return []
    known = set(known)
    found = []
    for key in rest:
        if not isinstance(key, str) or key in known:
            continue
        close = difflib.get_close_matches(key, THROTTLE_SETTINGS, n=3, cutoff=0.7)
        if close:  # the one its value is of the kind of, else the closest
            kind = [m for m in close if isinstance(rest[key], _KINDS[m])]
            found.append(f"{_REST}[{key!r}]: did you mean {(kind or close)[0]!r}? {_UNREAD}")
    return found


def _throttles(value: Mapping[object, object]) -> bool:
    """Whether a mapping holds DRF's throttle settings (a misspelt ``REST_FRAMEWORK``'s)."""
    return any(key in THROTTLE_SETTINGS[:2] for key in value)


def _error(text: str) -> checks.Error:
    return checks.Error(text, id="freqguard.E009")
