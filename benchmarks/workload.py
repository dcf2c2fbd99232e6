"""The seeded SMS stream every benchmark replays: Zipf recipients, 20 contents."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

RECIPIENTS = 1_000_000
# the SMS policy: (limit, window in seconds); the first two by recipient, the last two by
# recipient and content
RULES = [(15, 60), (50, 86_400), (2, 59), (5, 3_540)]
BY: list[str | tuple[str, ...]] = [
    "recipient",
    "recipient",
    ("recipient", "content"),
    ("recipient", "content"),
]
CONTENTS = [f"Your verification code is {1000 + n}" for n in range(20)]


def sms_stream(messages: int, seed: int = 7, exponent: float = 1.1) -> list[tuple[str, str]]:
    """``messages`` (recipient, content) pairs; recipient ranks follow Zipf(``exponent``)."""
    rng = random.Random(seed)
    weights = itertools.accumulate(1.0 / (rank**exponent) for rank in range(1, RECIPIENTS + 1))
    cum = list(weights)
    ranks = rng.choices(range(RECIPIENTS), cum_weights=cum, k=messages)
    # shuffle ids so that popular recipients are not the small numbers
    ids = rng.sample(range(10_000_000_000, 20_000_000_000), RECIPIENTS)
    return [(str(ids[r]), rng.choice(CONTENTS)) for r in ranks]


def limits_decider(storage: Any) -> Callable[[str, str], bool]:
    """The SMS policy with ``limits``' moving window, its four items hit one by one (it has
    no atomic multi-item hit: a message denied by one item has consumed those before it)."""
    from limits import RateLimitItemPerSecond, strategies

    limiter = strategies.MovingWindowRateLimiter(storage)
    items = [RateLimitItemPerSecond(limit, window) for limit, window in RULES]

    def decide(recipient: str, content: str) -> bool:
        ok = limiter.hit(items[0], "sms", recipient)
        ok = limiter.hit(items[1], "sms", recipient) and ok
        ok = limiter.hit(items[2], "sms", recipient, content) and ok
        return limiter.hit(items[3], "sms", recipient, content) and ok

    return decide


def server_rounds(
    doc: str, one_round: Callable[[Any, list[tuple[str, str]]], dict[str, float]]
) -> dict[str, float]:
    """Run a benchmark that replays the stream on a redis-server of its own, as its command
    line asks (``--messages``, ``--rounds``): the median of each figure
    ``one_round(server, stream)`` returns."""
    import argparse
    import statistics
    import tempfile
    import time
    from pathlib import Path

    from tests.servers import standalone

    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        rounds = []
        for n in range(args.rounds):
            began = time.perf_counter()
            rounds.append(one_round(server, stream))
            print(f"round {n + 1}: {time.perf_counter() - began:.0f} s")
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    recipients = len({r for r, _ in stream})
    print(f"\n{args.messages} messages, {recipients} recipients, median of {args.rounds}")
    return median
