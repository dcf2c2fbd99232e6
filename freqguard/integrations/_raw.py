"""What a key function's ``RequestInfo.raw`` is under each framework, and how it reads the
framework's own request from it: the hint of the error for an attribute ``RequestInfo``
does not have (``request.remote_addr``, ``request.query_params``), which names the
framework the key function runs under, not another's."""

from __future__ import annotations

__all__ = ["elsewhere"]

#: The peer's address as the frameworks name it: ``RequestInfo.client`` here.
_PEER = frozenset({"remote_addr", "remote_address", "client_addr", "REMOTE_ADDR"})


def elsewhere(name: str, raw: object) -> str:
    """The error for attribute ``name`` of a ``RequestInfo`` whose ``raw`` is ``raw``."""
    found = (
        f"RequestInfo has no attribute {name!r}: a key function gets freqguard's RequestInfo "
        "(method, path, path_params, headers, client), not the framework's request"
    )
    if name in _PEER:
        found += "; the peer's address is request.client (client_ip() behind proxies)"
    return f"{found}; {_read(name, raw)}"


def _read(name: str, raw: object) -> str:
    """How a key function reads ``name`` off the framework's request behind ``raw``."""
    if isinstance(raw, dict) and "wsgi.version" in raw:
        request = raw.get("werkzeug.request")
        if type(request).__module__.startswith("flask"):  # a key runs in the request
            return f"under Flask it is flask.request.{name} (from flask import request)"
        return f"the WSGI environ is its .raw: werkzeug.wrappers.Request(request.raw).{name}"
    if isinstance(raw, dict) and "type" in raw:
        return (
            f"the ASGI scope is its .raw: starlette.requests.Request(request.raw).{name} "
            "(under Starlette and FastAPI)"
        )
    if hasattr(raw, "META"):
        return f"Django's request (DRF's, under a throttle) is its .raw: request.raw.{name}"
    return f"the framework's own is its .raw: request.raw ({type(raw).__name__})"
