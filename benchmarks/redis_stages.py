"""Where the server time of one SMS decision goes: the policy function cut short after each
stage in turn.

    python -m benchmarks.redis_stages [--messages 20000]

Starts its own redis-server, fills it with 100,000 messages of the seeded SMS stream (the
sliding-log policy), then for each stage loads a copy of the library that returns right
after that stage and replays the next ``--messages`` messages through it, pipelined, reading
the FCALL time per call from ``INFO commandstats``. The cut copies that stop before the write
change nothing, so those stages see the same records. Differences between consecutive
stages are what each stage costs (roughly: the machine's noise is ±1 µs); the last row is
the whole function. Pipelined calls run with warm caches: the same function costs about
twice as much per call when calls arrive one by one (``benchmarks.redis_sms``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from redis import Redis

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import Guard, Strategy
from freqguard.backends.redis import LIBRARY, RedisBackend, function_args
from freqguard.script.contract import HIT
from tests.servers import standalone

# (stage, the line of policy.lua the function returns before): the first in policy(), the
# others in run(), which calls one step per line
STAGES = (
    ("enter FCALL", "  if not bound then\n"),
    ("+ read TIME", "  local cost, mode = tonumber(argv[2]), tonumber(argv[3])\n"),
    ("+ find the specs", "  local record, n = keys[1], #specs\n"),
    ("+ HMGET the fields", "  local after = {}  -- per state"),
    ("+ load the states", "  local waits, allowed = check_rules("),
    ("+ check every rule", "  if mode == HIT and allowed and cost > 0 then\n"),
    ("+ consume", "  local sets, drops, latest, added = changes("),
    ("+ write (HSET, PEXPIRE)", "  return reply(specs, allowed, now, waits, after, raws)\n"),
)


def per_call_us(client: Redis, library: str, batch: list[tuple[object, ...]]) -> float:
    client.function_load(library, replace=True)
    client.config_resetstat()
    for start in range(0, len(batch), 100):
        pipe = client.pipeline(transaction=False)
        for args in batch[start : start + 100]:
            pipe.execute_command(*args)  # type: ignore[no-untyped-call]
        pipe.execute(raise_on_error=False)
    stats = client.info("commandstats")["cmdstat_fcall"]
    return int(stats["usec"]) / int(stats["calls"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per stage")
    args = parser.parse_args()
    stream = sms_stream(100_000 + 2 * args.messages)
    with standalone(Path(tempfile.mkdtemp(prefix="fg-stages-"))) as server:
        client = Redis(port=server.port)
        plan = Guard(RedisBackend(client), [sms_policy(Strategy.SLIDING_LOG)])._policies.plan("sms")

        def batch(part: list[tuple[str, str]]) -> list[tuple[object, ...]]:
            return [
                function_args(plan.call(plan.texts({"recipient": r, "content": c}), None, 1, HIT))
                for r, c in part
            ]

        per_call_us(client, LIBRARY, batch(stream[:100_000]))  # the records the stages read
        replay = batch(stream[100_000 : 100_000 + args.messages])
        print(f"{'stage':<26}{'µs/call':>10}{'this stage':>12}")
        before = 0.0
        for name, line in STAGES:
            assert LIBRARY.count(line) == 1, line
            cut = LIBRARY.replace(line, "  do return '' end\n" + line)
            spent = per_call_us(client, cut, replay)
            print(f"{name:<26}{spent:>10.2f}{spent - before:>12.2f}")
            before = spent
        # the write stage changed the records of `replay`: the whole function gets the next
        # messages, as it would in production
        whole = per_call_us(client, LIBRARY, batch(stream[100_000 + args.messages :]))
        print(f"{'+ reply (whole function)':<26}{whole:>10.2f}{whole - before:>12.2f}")
        client.close()


if __name__ == "__main__":
    main()
