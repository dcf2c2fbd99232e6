"""The seeded SMS stream every benchmark replays: Zipf recipients, 20 contents."""

from __future__ import annotations

import itertools
import random

RECIPIENTS = 1_000_000
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
