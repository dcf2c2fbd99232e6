"""The four-rule SMS policy on in-process storage: freqguard vs limits vs throttled-py.

    python -m benchmarks.memory_sms [--messages 200000]

Each library gets the same seeded stream on real time, and its own memory storage:

* freqguard: one ``Guard.hit`` per message; exact sliding logs, all-or-nothing.
* limits: ``MovingWindowRateLimiter`` (exact) on ``MemoryStorage``, the four items hit one by
  one (its API has no atomic multi-item hit, so a message denied by one item has already
  consumed the items hit before it).
* throttled-py: four ``Throttled`` sliding-window limiters (an approximate, two-window
  estimate) on ``MemoryStore``, likewise hit one by one.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from datetime import timedelta

from benchmarks.workload import BY, RULES, limits_decider, sms_stream

Decide = Callable[[str, str], bool]


def freqguard_decider() -> Decide:
    from freqguard import Guard, MemoryBackend, Policy, Rate, Rule

    policy = Policy(
        "sms",
        *(
            Rule(Rate(limit, timedelta(seconds=window)), by=by, name=f"r{i}")
            for i, ((limit, window), by) in enumerate(zip(RULES, BY, strict=True))
        ),
    )
    # unbounded, as limits' storage is: the default bound (100,000 live states) would evict
    # states of this stream's 200,000 messages and the run would not be exact
    guard = Guard(MemoryBackend(max_keys=None), [policy])

    def decide(recipient: str, content: str) -> bool:
        return guard.hit("sms", recipient=recipient, content=content).allowed

    return decide


def limits_memory_decider() -> Decide:
    from limits import storage

    return limits_decider(storage.MemoryStorage())


def throttled_decider() -> Decide:
    from throttled import MemoryStore, RateLimiterType, Throttled, per_duration

    store = MemoryStore()
    limiters = [
        Throttled(
            using=RateLimiterType.SLIDING_WINDOW.value,
            quota=per_duration(timedelta(seconds=window), limit),
            store=store,
        )
        for limit, window in RULES
    ]

    def decide(recipient: str, content: str) -> bool:
        key_r, key_c = f"sms:{recipient}", f"sms:{recipient}:{content}"
        ok = not limiters[0].limit(f"0:{key_r}").limited
        ok = not limiters[1].limit(f"1:{key_r}").limited and ok
        ok = not limiters[2].limit(f"2:{key_c}").limited and ok
        return not limiters[3].limit(f"3:{key_c}").limited and ok

    return decide


def run(name: str, decide: Decide, stream: list[tuple[str, str]]) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    allowed = sum(1 for recipient, content in stream if decide(recipient, content))
    elapsed = time.perf_counter() - start
    return elapsed, allowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    stream = sms_stream(args.messages, args.seed)
    results = {}
    for name, factory in [
        ("freqguard", freqguard_decider),
        ("limits", limits_memory_decider),
        ("throttled-py", throttled_decider),
    ]:
        results[name] = run(name, factory(), stream)
    base = results["freqguard"][0]
    print(f"{args.messages} messages, Zipf recipients over 1,000,000 ids, 20 contents\n")
    columns = ("decisions/s", "µs/decision", "time vs freqguard", "admitted")
    print(f"{'library':<14}{columns[0]:>14}{columns[1]:>14}{columns[2]:>20}{columns[3]:>10}")
    for name, (elapsed, allowed) in results.items():
        rate = args.messages / elapsed
        print(
            f"{name:<14}{rate:>14,.0f}{elapsed / args.messages * 1e6:>14.2f}"
            f"{elapsed / base:>19.2f}x{allowed:>10,}"
        )


if __name__ == "__main__":
    main()
