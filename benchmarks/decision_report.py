"""What a decision's report costs: each rule's remaining and reset, read off the states a
Redis reply carries (``Decision.raw``, which the service's answer and the headers read).

    python -m benchmarks.decision_report [--decisions 20000] [--rounds 5]

Starts its own redis-server (a free port), takes ``--decisions`` hits of the four-rule SMS
policy (sliding logs: 300 recipients, 3 contents, so the logs hold entries), then times
reading ``raw`` on each, once (a decision computes it once); the median of ``--rounds``,
CPU µs a decision. Run it on two commits to compare (``git stash``, or a worktree).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from statistics import median

from benchmarks.redis_sms import sms_policy
from freqguard import Guard, Strategy
from freqguard.backends.redis import RedisBackend
from tests.servers import standalone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, standalone(Path(work)) as server:
        guard = Guard(RedisBackend(server.client), [sms_policy(Strategy.SLIDING_LOG)])
        took = []
        for _ in range(args.rounds):
            decisions = [
                guard.hit("sms", recipient=f"r{i % 300}", content=f"c{i % 3}")
                for i in range(args.decisions)
            ]
            began = time.process_time()
            for decision in decisions:
                decision.raw  # noqa: B018 (computed once, on first read)
            took.append((time.process_time() - began) / args.decisions * 1e6)
        guard.close()
    print(f"Decision.raw: {median(took):.2f} CPU µs a decision (rounds: {took})")


if __name__ == "__main__":
    main()
