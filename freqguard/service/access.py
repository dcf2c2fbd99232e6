"""The service's access log (``freqguard serve --access-log json``): a JSON object a line
per request, on the ``freqguard.service.access`` logger: the time, method, path, status,
duration, bytes answered, client, and for a call under ``/v1/policies`` the policy, the
outcome and the context with each value *digested* (keyed BLAKE2b, 16 hex characters), so
one recipient's calls can be followed without the log holding who they are. The key is
``FREQGUARD_SERVE_ACCESS_LOG_KEY`` when set (digests comparable across restarts and
hosts), else a random one for the run, shared by its workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["ACCESS_LOG_ENV", "AccessLog", "digested", "install_handler", "notes"]

#: Set (by ``freqguard serve --access-log json``) to the digests' key, in hex: the log is on.
ACCESS_LOG_ENV = "FREQGUARD_SERVE_ACCESS_LOG"
LOGGER = "freqguard.service.access"
_NOTE = "freqguard.access"  # the request state's entry a handler annotates
MAX_PATH = 200  # characters of a path in a line (a client chooses it)

log = logging.getLogger(LOGGER)


def digested(context: Mapping[str, Any], key: bytes) -> dict[str, str]:
    """Each of ``context``'s values as a keyed digest, under its name."""
    return {
        str(name)[:64]: hashlib.blake2b(str(value).encode(), key=key, digest_size=8).hexdigest()
        for name, value in context.items()
    }


def notes(scope: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a handler notes facts about its request (its policy, outcome, context) for
    the log line; None when no access log is kept (nothing to note)."""
    state = scope.get("state")
    return state.get(_NOTE) if isinstance(state, dict) else None


def install_handler() -> None:
    """Send the access logger's lines, as they are, to stderr (a worker's own handler: the
    lines are already JSON)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


class AccessLog:
    """An ASGI app that logs each HTTP request ``app`` answers, as a line of JSON.

    Args:
        app: the service's app.
        key: the digests' key (1 to 64 bytes).

    Raises:
        ValueError: a key that is empty or longer than 64 bytes.
    """

    def __init__(self, app: Any, key: bytes) -> None:
        if not 0 < len(key) <= hashlib.blake2b.MAX_KEY_SIZE:
            raise ValueError(f"an access log key is 1 to 64 bytes, got {len(key)}")
        self.app, self.key = app, key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        line: dict[str, Any] = {
            "time": "",
            "method": scope["method"],
            "path": scope["path"][:MAX_PATH],
            "status": 500,
            "ms": 0.0,
            "bytes": 0,
            "client": client[0] if client else None,
        }
        note: dict[str, Any] = {}
        scope.setdefault("state", {})[_NOTE] = note
        began = time.perf_counter()

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                line["status"] = message["status"]
            elif message["type"] == "http.response.body":
                line["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            line["ms"] = round((time.perf_counter() - began) * 1000, 3)
            line["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            line.update(note)
            if "context" in note:
                line["context"] = digested(note["context"], self.key)
            log.info(json.dumps(line))
