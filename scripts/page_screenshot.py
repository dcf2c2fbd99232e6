"""Make docs/images/service-page.png: the operator's page of ``freqguard serve`` on
examples/freqguard.toml, after a known run of hits, in headless Chromium.

    python scripts/page_screenshot.py [--out docs/images/service-page.png]

Starts the service on a free loopback port (memory://, one worker), sends hits for a few
recipients (some denied, by the per-recipient-and-content rule), sets one per-key limit,
then has Chromium load the page with one recipient looked up (the page's own query
parameters) and save what it shows. Stops the service by its PID.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the checkout's own test helpers
from tests.integrations.service_browser import CHROMIUM, headless  # noqa: E402
from tests.servers import free_port  # noqa: E402

SCRIPT = Path(sys.executable).parent / "freqguard"


def _serve(config: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [str(SCRIPT), "serve", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # the example's memory:// store, whatever this shell's FREQGUARD_URL names
        env={k: v for k, v in os.environ.items() if not k.startswith("FREQGUARD_")},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # bounded polling for the server to start
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(process.pid, signal.SIGTERM)
    raise SystemExit("the service did not start in 30 s")


def _traffic(url: str) -> None:
    """Hits of a few recipients: each content at most twice in 59 s, so the third and later
    of one content are denied (the first recipients send it most); one recipient gets a
    per-key daily limit."""
    with httpx.Client(base_url=url) as http:
        for number in range(6):
            recipient = f"+49176123456{number:02d}"
            sends = ["hello"] * (3 + (5 - number) // 2) + ["code 1234"]  # the first: most
            for content in sends:
                body = {"context": {"recipient": recipient, "content": content}}
                http.post("/v1/policies/sms/hit", json=body).raise_for_status()
        limit = {"context": {"recipient": "+4917612345600"}, "rate": "100/day"}
        http.put("/v1/policies/sms/limits/rcpt-1d", json=limit).raise_for_status()
        for _ in range(40):
            http.post("/v1/policies/sms-vendor/hit", json={"context": {}}).raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/service-page.png")
    args = parser.parse_args()
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    port = free_port()
    process = _serve(ROOT / "examples/freqguard.toml", port)
    try:
        url = f"http://127.0.0.1:{port}"
        _traffic(url)
        query = "/?policy=sms&recipient=%2B4917612345600&content=hello"
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    *headless(profile),
                    "--window-size=1000,1480",
                    f"--screenshot={args.out.resolve()}",
                    url + query,
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
