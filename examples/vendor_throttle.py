"""Several workers share one vendor limit (600 pushes per 30 s, bursts of 20) through acquire.

    FREQGUARD_URL=redis://127.0.0.1:6379 python -m examples.vendor_throttle

Each worker waits for its own turn (no polling, nothing borrowed from the future). The rule
is GCRA with a burst of 20 at 20/s: the first 20 pushes go at once, then one every 50 ms, and
in any t seconds the vendor sees at most 20 + 20·t pushes. With a Redis URL the workers are
processes sharing the limit through Redis; without one, threads share an in-memory backend.
"""

from __future__ import annotations

import multiprocessing
import os
import threading

from freqguard import CapExceeded, Clock, Guard, MemoryBackend, Policy, Rule, backend_from_url

VENDOR = Policy("im-vendor", Rule("600 per 30 seconds", strategy="gcra", burst=20, name="pushes"))
RULE = VENDOR.rules[0]
INTERVAL_US = -(-RULE.rate.window_us // RULE.rate.limit)  # µs between pushes after a burst


def worker(
    url: str,
    pushes: int,
    guard: Guard | None = None,
    clock: Clock | None = None,
    timeout: float = 60,
) -> list[int]:
    """Push ``pushes`` times, each after waiting for its turn.

    Returns:
        When each push was admitted, in µs of the limiter's clock (the Redis server's, or
        ``clock`` when given): the times the guarantee is about.
    """
    guard = guard or Guard(backend_from_url(url), [VENDOR], clock=clock)
    sent = []
    for _ in range(pushes):
        try:
            decision = guard.acquire("im-vendor", timeout=timeout)
        except CapExceeded:
            continue  # not within the timeout: give up on this push
        assert decision.receipt is not None  # an admitted hit always has one
        sent.append(decision.receipt.times_us[0])  # the vendor call would go here
    return sent


def _process(
    url: str,
    pushes: int,
    timeout: float,
    clock: Clock | None,
    out: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    out.put(worker(url, pushes, clock=clock, timeout=timeout))


def run(
    url: str | None,
    workers: int = 4,
    pushes: int = 30,
    clock: Clock | None = None,
    timeout: float = 60,
) -> list[int]:
    """Processes over Redis when ``url`` is given, else threads over one in-memory guard.

    Args:
        url: a Redis URL, or None for threads on a :class:`MemoryBackend`.
        workers: how many processes or threads.
        pushes: how many pushes each makes.
        clock: pins time (tests). Threads share it; each process gets its own copy, so
            with processes it pins one instant: use it with ``timeout=0``.
        timeout: how long a push may wait for its turn before it is given up.

    Returns:
        The admission times of every push, in µs, sorted.
    """
    if url:
        context = multiprocessing.get_context("spawn")
        out: multiprocessing.Queue[list[int]] = context.Queue()
        procs = [
            context.Process(target=_process, args=(url, pushes, timeout, clock, out))
            for _ in range(workers)
        ]
        for p in procs:
            p.start()
        times = [t for _ in procs for t in out.get(timeout=120)]
        for p in procs:
            p.join()
        return sorted(times)
    guard = Guard(MemoryBackend(clock), [VENDOR], clock=clock)
    results: list[list[int]] = [[] for _ in range(workers)]

    def thread_main(i: int) -> None:
        results[i] = worker("memory://", pushes, guard, clock, timeout)

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(t for r in results for t in r)


def summary(times_us: list[int]) -> str:
    """What a run shows: the burst, the sustained rate after it, and the rule's guarantee.

    Args:
        times_us: admission times in µs, sorted (what :func:`run` returns).
    """
    burst, rate = RULE.capacity, 1_000_000 / INTERVAL_US
    lines = [f"{len(times_us)} pushes admitted"]
    if times_us:
        head = times_us[:burst]
        lines.append(
            f"  burst: the first {len(head)} within {(head[-1] - head[0]) / 1000:.1f} ms "
            f"(the rule allows {burst} at once)"
        )
    if len(times_us) > burst:  # from the burst's last push on, one every INTERVAL_US
        span = (times_us[-1] - times_us[burst - 1]) / 1_000_000
        sustained = (len(times_us) - burst) / span if span else float("inf")
        lines.append(
            f"  then: {len(times_us) - burst} more in {span:.2f}s = {sustained:.1f}/s "
            f"(limit {rate:g}/s)"
        )
    lines.append(f"  guarantee: in any t seconds at most {burst} + {rate:g}*t pushes")
    return "\n".join(lines)


def main() -> None:
    print(summary(run(os.environ.get("FREQGUARD_URL"))))


if __name__ == "__main__":
    main()
