"""What people coming from Flask-Limiter write to the Flask extension, refused naming
freqguard's way (docs/coming-from/flask-limiter.md maps each idiom): a bare ``TypeError``
or ``AttributeError`` would leave them to guess it."""

from __future__ import annotations

from collections.abc import Mapping

from freqguard.errors import ConfigError

__all__ = ["refuse_theirs"]


#: Flask-Limiter's ``limit()`` arguments, and freqguard's way for each.
_THEIRS = {
    "per_method": "each method its own budget: "
    "key=lambda request: {**key(request), 'method': request.method}",
    "key_func": "key= here, a function of the request (client_ip(), header(...))",
    "exempt_when": "raise SkipRequest in the key function for a request left uncapped",
    "override_defaults": "defaults=True here (on a Blueprint's cap)",
    "error_message": "the answer is @app.errorhandler(CapExceeded)'s",
    "on_breach": "a refusal is CapExceeded: @app.errorhandler(CapExceeded)",
    "scope": "name= here: a budget shared by every view naming it",
}


def refuse_theirs(given: Mapping[str, object]) -> None:
    """Flask-Limiter's ``limit()`` arguments, refused naming freqguard's way.

    Raises:
        ConfigError: for one of them; TypeError for any other name, as Python would.
    """
    for name in given:
        if name in _THEIRS:
            raise ConfigError(f"Flask-Limiter's {name}= is not capped()'s: {_THEIRS[name]}")
        raise TypeError(f"capped() got an unexpected keyword argument {name!r}")
