"""What per-key limits and tiers cost on Redis: the four-rule SMS policy, plain, with limits
set for 1 % of the recipients, and with a tier table on one rule, in one run.

    python -m benchmarks.limits_overhead [--messages 200000] [--rounds 3]

Starts its own redis-server on a free loopback port. Each round replays the seeded SMS
stream (Zipf over 1,000,000 recipients, 20 contents) on an empty server, once per case:

* ``plain``: the policy as it is;
* ``limits``: the same, after ``set_limit`` for 1 % of the stream's distinct recipients
  (half of them a faster minute, half exempt from the content rule); the stream is replayed
  in two halves, the messages of recipients without a limit and those with one, so each is
  timed on its own;
* ``tiers``: rule ``r0`` with ``rate_for=TierRates("plan", ...)`` and a plan per message
  (three plans, by recipient).

Reported per case (median of the rounds): server execution µs per decision (``INFO
commandstats``, FCALL only), and ``used_memory`` per distinct recipient after the stream.
The target (issue 19): recipients without a limit at <= 1.1x the plain policy's µs.
"""

from __future__ import annotations

import zlib
from typing import Any

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import server_rounds
from freqguard import Guard, Policy, Rule, Strategy, TierRates
from freqguard.backends.redis import RedisBackend
from tests.servers import RedisServer

Stream = list[tuple[str, str]]
PLANS = ("free", "pro", "team")


def _plan(recipient: str) -> str:
    return PLANS[zlib.crc32(recipient.encode()) % 3]


def _tiered() -> Policy:
    plain = sms_policy(Strategy.SLIDING_LOG)
    first = plain.rules[0]
    tiers = TierRates("plan", {"pro": "30/minute", "team": "60/minute"})
    rule = Rule(first.rate, first.by, name=first.id, rate_for=tiers)
    return Policy("sms", rule, *plain.rules[1:])


def _replay(server: RedisServer, guard: Guard, stream: Stream, tiered: bool) -> float:
    """Server µs per decision of replaying ``stream``."""
    client = server.client
    client.config_resetstat()
    for recipient, content in stream:
        if tiered:
            guard.hit("sms", recipient=recipient, content=content, plan=_plan(recipient))
        else:
            guard.hit("sms", recipient=recipient, content=content)
    stats = client.info("commandstats")
    return int(stats["cmdstat_fcall"]["usec"]) / max(len(stream), 1)


def one_round(server: RedisServer, stream: Stream) -> dict[str, float]:
    client = server.client
    recipients = sorted({r for r, _ in stream})
    limited = set(recipients[::100])  # 1 %
    out: dict[str, float] = {}
    for case in ("plain", "limits", "tiers"):
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        policy = _tiered() if case == "tiers" else sms_policy(Strategy.SLIDING_LOG)
        guard = Guard(RedisBackend(client), [policy])
        plan: dict[str, Any] = {"plan": "pro"} if case == "tiers" else {}
        guard.peek("sms", recipient="warm", content="up", **plan)
        if case == "limits":
            for n, recipient in enumerate(sorted(limited)):
                if n % 2:
                    guard.set_limit("sms", "r0", "30/minute", recipient=recipient)
                else:
                    guard.set_limit("sms", "r2", None, recipient=recipient)
            rest = [m for m in stream if m[0] not in limited]
            mine = [m for m in stream if m[0] in limited]
            out["limits: recipients without one"] = _replay(server, guard, rest, False)
            out["limits: recipients with one"] = _replay(server, guard, mine, False)
            out["limits: all"] = (
                out["limits: recipients without one"] * len(rest)
                + out["limits: recipients with one"] * len(mine)
            ) / len(stream)
        else:
            out[case] = _replay(server, guard, stream, case == "tiers")
        used = int(client.info("memory")["used_memory"]) - before
        out[f"{case} bytes"] = used / len(recipients)
        guard.close()
    return out


def main() -> None:
    median = server_rounds(__doc__, one_round)
    plain = median["plain"]
    print(f"{'case':36} {'server µs/decision':>20} {'x plain':>8}")
    for key in (
        "plain",
        "limits: recipients without one",
        "limits: recipients with one",
        "limits: all",
        "tiers",
    ):
        print(f"{key:36} {median[key]:20.2f} {median[key] / plain:8.3f}")
    print(f"\n{'case':36} {'bytes/recipient':>20}")
    for case in ("plain", "limits", "tiers"):
        print(f"{case:36} {median[case + ' bytes']:20.1f}")


if __name__ == "__main__":
    main()
