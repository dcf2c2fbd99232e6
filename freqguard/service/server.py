"""How ``freqguard serve`` runs uvicorn: the event loop and HTTP parser it picks, and
``TCP_NODELAY`` on every connection a worker accepts.

With ``--workers`` above 1, uvicorn binds the listening socket in the supervisor as
``socket.socket(AF_INET, SOCK_STREAM)`` (protocol number 0) and hands it to each worker.
asyncio's own loop sets ``TCP_NODELAY`` only on sockets whose ``proto`` is
``IPPROTO_TCP``, and a socket accepted from that listener carries 0: Nagle's algorithm then
holds back the body uvicorn writes after the headers until the client's delayed ACK,
about 40 ms, on every response. The protocol classes here set the option on each
connection themselves, whatever the loop and however the socket was made.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, cast

from uvicorn.protocols.http.h11_impl import H11Protocol

from freqguard.errors import ConfigError, install

__all__ = [
    "LOOPS",
    "PARSERS",
    "Combined",
    "H11NoDelay",
    "Wire",
    "nodelay",
    "pick",
]

#: ``serve --loop`` and ``--http``: "auto" takes uvloop and httptools when installed.
LOOPS = ("auto", "uvloop", "asyncio")
PARSERS = ("auto", "httptools", "h11")


def nodelay(transport: asyncio.BaseTransport) -> None:
    """Set ``TCP_NODELAY`` on the TCP socket under ``transport`` (a Unix socket: nothing)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Combined:
    """A transport whose writes in one turn of the event loop leave as one.

    uvicorn writes a response's head and its body separately; with Nagle off each write
    is a segment of its own and a system call (half the cost of a small answer). Held
    until the loop's next turn, they leave together, with no delay added: a cork for one
    turn. Everything but ``write`` and ``close`` is the transport's own.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _wired(transport: asyncio.Transport) -> asyncio.Transport:
    nodelay(transport)
    return cast(asyncio.Transport, Combined(transport))


class H11NoDelay(H11Protocol):
    """uvicorn's h11 protocol, its connections without Nagle's delay (and its writes
    combined)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_wired(transport))


if find_spec("httptools") is not None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HttpToolsNoDelay(HttpToolsProtocol):
        """uvicorn's httptools protocol, its connections without Nagle's delay (and its
        writes combined)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_wired(transport))


@dataclass(frozen=True)
class Wire:
    """The loop and the parser a worker runs: their names (for the log) and what uvicorn
    takes for them."""

    loop: str
    parser: str
    protocol: type[asyncio.Protocol]

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
            f"loop must be one of {', '.join(LOOPS)}, got {loop!r}; "
            f"http one of {', '.join(PARSERS)}, got {parser!r}"
        )
    for name, asked in (("uvloop", loop), ("httptools", parser)):
        if asked == name and find_spec(name) is None:
            raise ConfigError(f"{name} is not installed: {install('serve')}")
    if loop == "auto":
        loop = "uvloop" if find_spec("uvloop") is not None else "asyncio"
    if parser == "auto":
        parser = "httptools" if find_spec("httptools") is not None else "h11"
    protocol: type[asyncio.Protocol] = H11NoDelay
    if parser == "httptools":
        protocol = HttpToolsNoDelay
    return Wire(loop, parser, protocol)
