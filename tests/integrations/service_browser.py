"""A headless chromium the service's page tests drive: the DevTools protocol over the pipe
chromium opens on file descriptors 3 and 4 (``--remote-debugging-pipe``: JSON messages
ended by a NUL byte), so a test can type into the page and press its buttons with the
standard library alone. Started by the test, stopped by its PID."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_PLACE = (
    "import os, sys\n"
    "reads, writes = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.dup2(reads, 3); os.dup2(writes, 4); os.close(reads); os.close(writes)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def headless(profile: Path | str) -> list[str]:
    """Headless chromium loading a page once (its script given 10 s of virtual time): the
    command before what it does with the page (``--dump-dom``, ``--screenshot=...``)."""
    assert CHROMIUM is not None
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
    ]


class Browser:
    """One page of a headless chromium: :meth:`open` a URL, :meth:`run` a script in it."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()
        # chromium reads fd 3 and writes fd 4: a wrapper puts the pipes there (from fds
        # above both, so that neither move overwrites the other) and runs it in its place
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        self._fds_mine_only(to_browser, from_browser)
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PLACE,
                str(high[0]),
                str(high[1]),
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=tuple(high),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._fds_mine_only(*high)
        self._next, self._buffer = 0, b""
        targets = self._call("Target.getTargets")["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self._session = self._call("Target.attachToTarget", targetId=page, flatten=True)[
            "sessionId"
        ]

    @staticmethod
    def _fds_mine_only(*fds: int) -> None:
        for fd in fds:  # the child holds its ends; ours would keep the pipe open for ever
            os.close(fd)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read], [], [], max(left, 0))
            if not ready:
                raise AssertionError("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise AssertionError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        found: dict[str, Any] = json.loads(message)
        return found

    def _call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        sent: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session is not None:
            sent["sessionId"] = session
        os.write(self._write, json.dumps(sent).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:  # events arrive between the answers: skipped
            message = self._message(deadline)
            if message.get("id") == self._next:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def run(self, script: str) -> Any:
        """``script``'s value in the page (a promise awaited), as JSON values."""
        answer = self._call(
            "Runtime.evaluate",
            self._session,
            expression=script,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"the page's script failed: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def until(self, script: str, what: str, seconds: float = 30) -> Any:
        """``script``'s value once it is truthy (bounded polling of the page)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.run(script)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"the page never showed {what}")

    def open(self, url: str) -> None:
        """Go to ``url`` and wait until the page's script has loaded it."""
        self._call("Page.navigate", self._session, url=url)
        self.until("document.readyState === 'complete' && document.body.dataset.ready", url)

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except AssertionError:
            self._process.kill()
        self._process.wait(timeout=30)
        os.close(self._write)
        os.close(self._read)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
