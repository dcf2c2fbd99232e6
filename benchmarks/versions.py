"""Two versions of freqguard side by side, in one run: the hit path before and after a change.

    python -m benchmarks.versions --before REF [--after REF] [--rounds 5] [--messages 20000]

Each version is checked out (``git worktree``, detached, removed afterwards) and measured in
subprocesses that alternate, round after round, so that drift on a shared machine falls on
both alike. Every subprocess replays the seeded SMS stream (``benchmarks.workload``) through
the four-rule SMS policy (sliding logs, ``benchmarks.redis_sms.sms_policy``) on a pinned
clock, each case on fresh state:

* ``memory sync hit`` / ``memory async hit``: ``Guard.hit`` / ``AsyncGuard.hit``, the one-call
  path;
* ``memory sync run`` / ``memory async run``: the same hits with a deny cache, so every hit
  goes through the operation driver (``_run``) instead;
* ``redis sync hit``: ``Guard.hit`` on a standalone redis-server of this run's own.

Reported per case: the median over rounds of this process's CPU µs per hit, before and
after, and after/before. ``--after`` defaults to the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent

CASES = (
    "memory sync hit",
    "memory async hit",
    "memory sync run",
    "memory async run",
    "redis sync hit",
)

# Run in a subprocess whose PYTHONPATH puts one version first; prints {case: cpu µs per hit}.
PROBE = r"""
import asyncio, json, sys, time
from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, Strategy
messages, port = int(sys.argv[1]), int(sys.argv[2])
stream = sms_stream(messages)
policy = sms_policy(Strategy.SLIDING_LOG)
out = {}

def timed(name, run):
    start = time.process_time()
    run()
    out[name] = (time.process_time() - start) * 1e6 / messages

def sync(deny_cache):
    clock = ManualClock(1_700_000_000)
    guard = Guard(MemoryBackend(max_keys=None), [policy], clock, deny_cache=deny_cache)
    hit = guard.hit
    def run():
        for recipient, content in stream:
            hit("sms", recipient=recipient, content=content)
            clock.advance(0.001)
    return run

def asynchronous(deny_cache):
    clock = ManualClock(1_700_000_000)
    guard = AsyncGuard(MemoryBackend(max_keys=None), [policy], clock, deny_cache=deny_cache)
    async def go():
        for recipient, content in stream:
            await guard.hit("sms", recipient=recipient, content=content)
            clock.advance(0.001)
    return lambda: asyncio.run(go())

timed("memory sync hit", sync(0))
timed("memory async hit", asynchronous(0))
timed("memory sync run", sync(100_000))
timed("memory async run", asynchronous(100_000))
from redis import Redis
from freqguard.backends.redis import RedisBackend
client = Redis(port=port)
client.flushall()
clock = ManualClock(1_700_000_000)
guard = Guard(RedisBackend(client), [policy], clock)
def redis_run():
    for recipient, content in stream:
        guard.hit("sms", recipient=recipient, content=content)
        clock.advance(0.001)
timed("redis sync hit", redis_run)
print(json.dumps(out))
"""


def _worktree(ref: str, where: Path) -> Path:
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(where), ref], cwd=ROOT, check=True
    )
    return where


def _probe(version: Path, messages: int, port: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{version}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(messages), str(port)],
        cwd=version,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a git ref")
    parser.add_argument("--after", default=None, help="a git ref (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args(argv)
    from tests.servers import standalone

    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp) / "redis") as server:
        made = [_worktree(args.before, Path(tmp) / "before")]
        if args.after is not None:
            made.append(_worktree(args.after, Path(tmp) / "after"))
        versions = {"before": made[0], "after": made[1] if args.after else ROOT}
        try:
            got: dict[str, dict[str, list[float]]] = {v: {c: [] for c in CASES} for v in versions}
            for round_ in range(args.rounds):
                order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
                for version in order:
                    for case, value in _probe(
                        versions[version], args.messages, server.port
                    ).items():
                        got[version][case].append(value)
                print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for path in made:
                subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT)
    print(f"{'case':20} {'before µs/hit':>14} {'after µs/hit':>13} {'after/before':>13}")
    for case in CASES:
        before, after = median(got["before"][case]), median(got["after"][case])
        print(f"{case:20} {before:14.2f} {after:13.2f} {after / before:13.3f}")


if __name__ == "__main__":
    main()
