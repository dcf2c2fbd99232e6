"""Several worker processes share one vendor limit (600 pushes per 30 s) through acquire.

    FREQGUARD_URL=redis://127.0.0.1:6379 python -m examples.vendor_throttle

Each worker waits for its own turn (no polling, nothing borrowed from the future), so the
vendor never sees more than the limit in any window. With a Redis URL the workers are
processes sharing the limit through Redis; without one, threads share an in-memory backend.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

from freqguard import CapExceeded, Clock, Guard, MemoryBackend, Policy, Rule, backend_from_url

VENDOR = Policy("im-vendor", Rule("600 per 30 seconds", strategy="gcra", burst=20, name="pushes"))


def worker(
    url: str,
    pushes: int,
    guard: Guard | None = None,
    clock: Clock | None = None,
    timeout: float = 60,
) -> list[float]:
    """Push ``pushes`` times, each after waiting for its turn; returns when each went out."""
    guard = guard or Guard(backend_from_url(url), [VENDOR])
    now = clock.now if clock else time.time
    sent = []
    for _ in range(pushes):
        try:
            guard.acquire("im-vendor", timeout=timeout)
        except CapExceeded:
            continue  # not within the timeout: give up on this push
        sent.append(now())  # the vendor call would go here
    return sent


def _process(url: str, pushes: int, timeout: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(worker(url, pushes, timeout=timeout))


def run(
    url: str | None,
    workers: int = 4,
    pushes: int = 30,
    clock: Clock | None = None,
    timeout: float = 60,
) -> list[float]:
    """Processes over Redis when ``url`` is given, else threads over one in-memory guard."""
    if url:
        context = multiprocessing.get_context("spawn")
        out: multiprocessing.Queue[list[float]] = context.Queue()
        procs = [
            context.Process(target=_process, args=(url, pushes, timeout, out))
            for _ in range(workers)
        ]
        for p in procs:
            p.start()
        times = [t for _ in procs for t in out.get(timeout=120)]
        for p in procs:
            p.join()
        return sorted(times)
    guard = Guard(MemoryBackend(clock), [VENDOR], clock=clock)
    results: list[list[float]] = [[] for _ in range(workers)]

    def thread_main(i: int) -> None:
        results[i] = worker("memory://", pushes, guard, clock, timeout)

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(t for r in results for t in r)


def main() -> None:
    url = os.environ.get("FREQGUARD_URL")
    times = run(url)
    span = times[-1] - times[0]
    print(f"{len(times)} pushes in {span:.2f}s ({len(times) / max(span, 1e-9):.1f}/s; limit 20/s)")


if __name__ == "__main__":
    main()
