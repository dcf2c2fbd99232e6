"""How ``freqguard serve`` runs uvicorn: the event loop and HTTP parser it picks, and the
listening socket it binds itself and hands to uvicorn.

uvicorn's own listener for several workers has protocol number 0, and asyncio sets
``TCP_NODELAY`` only on ``IPPROTO_TCP`` sockets: Nagle's algorithm then held each body
behind its head until the client's delayed ACK (~40 ms). An accepted socket inherits the
listener's ``TCP_NODELAY`` (Linux, the BSDs): :func:`listener` sets it once, for every
worker, loop and parser (design note 82).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

import uvicorn

from freqguard.errors import ConfigError, install, shown

__all__ = ["APP", "LOOPS", "PARSERS", "Wire", "listener", "pick", "run"]

#: The app's factory each worker calls.
APP = "freqguard.service:from_env"

#: ``serve --loop`` and ``--http``: "auto" takes uvloop and httptools when installed.
LOOPS = ("auto", "uvloop", "asyncio")
PARSERS = ("auto", "httptools", "h11")


def listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host`` (an IPv6 address has a colon) and ``port``, with
    ``TCP_NODELAY`` for every connection accepted from it; uvicorn listens on it.

    Raises:
        ConfigError: the address is taken, or cannot be bound (what the system said).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        raise ConfigError(f"cannot serve on {shown}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)  # the workers' processes are handed it
    return sock


@dataclass(frozen=True)
class Wire:
    """The loop and the parser a worker runs, as uvicorn names them."""

    loop: str
    parser: str

    def __str__(self) -> str:
        return f"loop {self.loop}, parser {self.parser}"


def pick(loop: str = "auto", parser: str = "auto") -> Wire:
    """The loop and parser ``--loop`` and ``--http`` ask for ("auto": the fast one when
    installed, else asyncio's and h11).

    Raises:
        ConfigError: a name not in :data:`LOOPS` or :data:`PARSERS`, or one that is not
            installed (the ``serve`` extra installs both).
    """
    if loop not in LOOPS or parser not in PARSERS:
        raise ConfigError(
            f"loop must be one of {', '.join(LOOPS)}, got {shown(loop)}; "
            f"http one of {', '.join(PARSERS)}, got {shown(parser)}"
        )
    for name, asked in (("uvloop", loop), ("httptools", parser)):
        if asked == name and find_spec(name) is None:
            raise ConfigError(f"{name} is not installed: {install('serve')}")
    if loop == "auto":
        loop = "uvloop" if find_spec("uvloop") is not None else "asyncio"
    if parser == "auto":
        parser = "httptools" if find_spec("httptools") is not None else "h11"
    return Wire(loop, parser)


def run(
    wire: Wire,
    host: str,
    port: int,
    workers: int,
    bound: Callable[[], object] = lambda: None,
    **settings: Any,
) -> bool:
    """Serve :data:`APP` with uvicorn on :func:`listener`'s socket, ``workers`` processes;
    ``settings``: uvicorn's own; ``bound``: called once the socket is bound. One worker is
    handed the socket (and closes it as it stops: no new connection waits on a server that
    is finishing); several share it by its descriptor.

    Returns:
        Whether uvicorn started (else its log said why).

    Raises:
        ConfigError: the address cannot be bound.
    """
    sock = listener(host, port)
    bound()
    options = dict(factory=True, loop=wire.loop, http=wire.parser, workers=workers, **settings)
    try:
        if workers == 1:
            server = uvicorn.Server(uvicorn.Config(APP, **options))
            server.run(sockets=[sock])
            return server.started
        uvicorn.run(APP, fd=sock.fileno(), **options)
    except SystemExit as exc:  # uvicorn's own exit: it could not start
        return exc.code in (None, 0)
    finally:
        sock.close()
    return True
