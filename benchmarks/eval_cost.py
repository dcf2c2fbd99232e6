"""Where an EVAL script's server time goes, against the same call as a Redis Function.

    python -m benchmarks.eval_cost [--messages 5000] [--rounds 2]

Starts its own redis-server (a free port) and sends the four-rule SMS policy's hits
through ``RedisBackend(scripts="functions")`` and ``scripts="eval"`` in turn, ``--rounds``
times; per mode, decisions a second (one sequential client) and the server's µs a call
(``INFO commandstats``). Then the EVAL script's body alone (the library built, nothing
called) and an empty script: on Redis 7, which keeps every global read-only, each EVAL
runs the body again, so its cost is a floor under every call of that mode.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from redis import Redis

from benchmarks.redis_sms import sms_policy
from freqguard import Guard, Strategy
from freqguard.backends.redis import RedisBackend
from freqguard.script import library
from tests.servers import standalone

_COMMANDS = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")


def _server_us(client: Redis) -> tuple[float, int]:
    found = client.info("commandstats")
    usec = sum(found[name]["usec"] for name in _COMMANDS if name in found)
    calls = sum(found[name]["calls"] for name in _COMMANDS if name in found)
    return usec / max(calls, 1), calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    stream = [(f"r{i * 7919 % 100_000}", f"c{i % 20}") for i in range(args.messages)]
    with tempfile.TemporaryDirectory() as work, standalone(Path(work)) as server:
        client = server.client
        for _ in range(args.rounds):
            for mode in ("functions", "eval"):
                client.flushall()
                client.config_resetstat()
                guard = Guard(
                    RedisBackend(client, scripts=mode), [sms_policy(Strategy.SLIDING_LOG)]
                )
                began = time.perf_counter()
                for recipient, content in stream:
                    guard.hit("sms", recipient=recipient, content=content)
                rate = len(stream) / (time.perf_counter() - began)
                usec, calls = _server_us(client)
                print(f"{mode:9}  {rate:8.0f} decisions/s  {usec:6.1f} server µs a call ({calls})")
        body = library.scripts()[0].replace("return lib[1](KEYS, ARGV)\n", "return 1\n")
        for name, script in (("empty script", "return 1"), ("EVAL body alone", body)):
            sha = client.script_load(script)
            client.config_resetstat()
            for _ in range(2_000):
                client.evalsha(sha, 0)
            print(f"{name:15}  {_server_us(client)[0]:6.1f} server µs a call")


if __name__ == "__main__":
    main()
