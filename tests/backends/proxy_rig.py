"""A TCP proxy in front of one real redis-server, for the edge tests (``test_edge_faults.py``):
the client's connections go through it, and a test arms one fault for the next script call
that passes (an FCALL or EVALSHA; the connection's own set-up commands pass untouched):

- :meth:`Proxy.hold` forwards a batch up to its second script call and holds the rest until
  :meth:`Proxy.release` (the test changes the server in between: a batch half applied), or
  drops it and closes both ends (``release(cut=True)``);
- :meth:`Proxy.cut_request` forwards the first ``n`` bytes of the call, then closes both ends
  (a connection cut mid-send: the server never reads a whole call);
- :meth:`Proxy.cut_reply` forwards the first ``n`` bytes of the reply to it, then closes both
  ends (``n=0``: the server ran the call and its reply is lost).

No sleeps: each pump thread blocks on its socket, and a test waits on events, bounded.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading

from tests import servers

__all__ = ["Proxy"]

_CALL = re.compile(rb"\*\d+\r\n\$(?:5\r\nFCALL|7\r\nEVALSHA)\r\n", re.IGNORECASE)
WAIT = 10.0  # the longest a test waits for a fault's moment: only a broken run reaches it


class Proxy:
    """Forwards loopback connections on :attr:`port` to ``target`` (a port), one fault armed
    at a time (see the module's docstring)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = servers.free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._fault: tuple[str, int] | None = None  # ("hold"|"request"|"reply", n)
        self._reply_cut: int | None = None  # armed by a call that passed, for its reply
        self.held = threading.Event()  # a batch is held after its first call
        self._go = threading.Event()
        self.done = threading.Event()  # the armed fault happened
        self._sockets: list[socket.socket] = []
        self._cut = False  # a held batch's rest is dropped, its connection closed
        threading.Thread(target=self._accept, daemon=True).start()

    # -- what a test arms -----------------------------------------------------------------

    def hold(self) -> None:
        self._arm(("hold", 0))

    def release(self, cut: bool = False) -> None:
        """Let a held batch's rest go on, or (``cut``) close both ends instead: the server
        ran its first call and never reads the others."""
        self._cut = cut
        self._go.set()

    def cut_request(self, n: int) -> None:
        self._arm(("request", n))

    def cut_reply(self, n: int = 0) -> None:
        self._arm(("reply", n))

    def wait(self, event: threading.Event) -> None:
        assert event.wait(WAIT), "the proxy never saw the armed call"

    def close(self) -> None:
        self._go.set()
        _shut(self._listener)  # a shutdown wakes the accept (a close alone leaves it listening)
        for sock in list(self._sockets):
            _shut(sock)

    def _arm(self, fault: tuple[str, int]) -> None:
        with self._lock:
            self._fault, self._reply_cut = fault, None
            self.held.clear()
            self._go.clear()
            self.done.clear()

    # -- the pumps --------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self._sockets += [client, server]
            pair = (client, server)
            threading.Thread(target=self._up, args=pair, daemon=True).start()
            threading.Thread(target=self._down, args=pair, daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server: a script call may meet the armed fault."""
        try:
            while data := client.recv(65536):
                calls = [m.start() for m in _CALL.finditer(data)]
                with self._lock:
                    fault = self._fault if calls else None
                    if fault is not None and fault[0] == "reply":
                        self._fault, self._reply_cut = None, fault[1]
                    elif fault is not None and (fault[0] == "request" or len(calls) > 1):
                        self._fault = None
                    else:
                        fault = None
                if fault is None or fault[0] == "reply":
                    server.sendall(data)
                elif fault[0] == "request":
                    server.sendall(data[: calls[0] + fault[1]])
                    self.done.set()
                    break
                else:  # hold: the first call goes, the rest once released
                    server.sendall(data[: calls[1]])
                    self.held.set()
                    self._go.wait(WAIT)
                    if self._cut:
                        self.done.set()
                        break
                    server.sendall(data[calls[1] :])
                    self.done.set()
        except OSError:
            pass
        _shut(client)
        _shut(server)

    def _down(self, client: socket.socket, server: socket.socket) -> None:
        """Server to client: the reply to an armed call may be cut."""
        try:
            while data := server.recv(65536):
                with self._lock:
                    cut, self._reply_cut = self._reply_cut, None
                if cut is None:
                    client.sendall(data)
                    continue
                client.sendall(data[:cut])
                self.done.set()
                break
        except OSError:
            pass
        _shut(client)
        _shut(server)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
