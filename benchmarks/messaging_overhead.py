"""What messaging semantics cost on Redis: the four-rule SMS policy, plain, with its day
rule counted per calendar day in each recipient's zone, and with quiet hours besides, in one
run.

    python -m benchmarks.messaging_overhead [--messages 200000] [--rounds 3]

Starts its own redis-server on a free loopback port. Each round replays the seeded SMS
stream (Zipf over 1,000,000 recipients, 20 contents) on an empty server, once per case, on
a pinned clock that starts on 2026-06-11 at 10:00 UTC and moves 10 ms a message:

* ``plain``: the policy as it is (rule ``r1``: 50 in any 24 hours);
* ``calendar``: ``r1`` as 50 per calendar day in the recipient's zone (``tz_from``), the
  zones a realistic mix of twelve, by recipient;
* ``calendar + quiet (none)``: the same with quiet hours that no hit of the stream falls in
  (``01:00`` to ``01:01``, local): what checking them costs;
* ``calendar + quiet``: with ``QuietHours("21:00", "08:00", tz_from="tz")``: at the
  stream's hours several zones are quiet, and their hits are denied (they write nothing,
  which makes them cheaper: their share is printed).

The cases run in an order that turns each round. Reported per case (median of the rounds):
server execution µs per decision (``INFO commandstats``, FCALL only), and ``used_memory``
per distinct recipient after the stream.
The target (issue 20): <= 1.2x the plain policy's µs.
"""

from __future__ import annotations

import zlib

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import server_rounds
from freqguard import Guard, ManualClock, Policy, QuietHours, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from tests.servers import RedisServer

Stream = list[tuple[str, str]]
START = 1_781_172_000.0  # 2026-06-11 10:00 UTC
STEP = 0.01  # seconds between messages
#: Where the recipients are, weighted roughly as a global platform's audience.
ZONES = (
    "Asia/Shanghai",
    "Asia/Shanghai",
    "Asia/Kolkata",
    "Asia/Kolkata",
    "America/New_York",
    "America/Los_Angeles",
    "Europe/Berlin",
    "Europe/London",
    "America/Sao_Paulo",
    "Asia/Tokyo",
    "Asia/Jakarta",
    "Africa/Lagos",
    "Australia/Sydney",
    "America/Mexico_City",
)
CASES = ("plain", "calendar", "calendar + quiet (none)", "calendar + quiet")


def _zone(recipient: str) -> str:
    return ZONES[zlib.crc32(recipient.encode()) % len(ZONES)]


def _policy(case: str) -> Policy:
    plain = sms_policy(Strategy.SLIDING_LOG)
    if case == "plain":
        return plain
    rules = list(plain.rules)
    day = rules[1]
    rules[1] = Rule(day.rate, day.by, name=day.id, calendar=True, tz_from="tz")
    quiet = None
    if case == "calendar + quiet (none)":
        quiet = QuietHours("01:00", "01:01", tz_from="tz")
    elif case == "calendar + quiet":
        quiet = QuietHours("21:00", "08:00", tz_from="tz")
    return Policy("sms", *rules, quiet=quiet)


def _replay(
    server: RedisServer, guard: Guard, clock: ManualClock, stream: Stream, case: str
) -> tuple[float, float]:
    """Server µs per decision of replaying ``stream``, and the share of quiet denials."""
    client = server.client
    client.config_resetstat()
    zoned = case != "plain"
    quiet = 0
    for recipient, content in stream:
        clock.advance(STEP)
        if zoned:
            d = guard.hit("sms", recipient=recipient, content=content, tz=_zone(recipient))
            quiet += bool(d.denied_by) and d.denied_by[-1].id == "quiet-hours"
        else:
            guard.hit("sms", recipient=recipient, content=content)
    stats = client.info("commandstats")
    return int(stats["cmdstat_fcall"]["usec"]) / max(len(stream), 1), quiet / len(stream)


_ROUND = [0]


def one_round(server: RedisServer, stream: Stream) -> dict[str, float]:
    """Every case once, in an order that turns by one each round (so that no case is
    always the first on a fresh server)."""
    client = server.client
    recipients = len({r for r, _ in stream})
    out: dict[str, float] = {}
    turn = _ROUND[0] % len(CASES)
    _ROUND[0] += 1
    for case in CASES[turn:] + CASES[:turn]:
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        clock = ManualClock(START)
        guard = Guard(RedisBackend(client), [_policy(case)], clock=clock)
        out[case], out[f"{case} quiet"] = _replay(server, guard, clock, stream, case)
        out[f"{case} bytes"] = (int(client.info("memory")["used_memory"]) - before) / recipients
        guard.close()
    return out


def main() -> None:
    median = server_rounds(__doc__, one_round)
    heads = ("server µs/decision", "x plain", "bytes/recipient", "quiet")
    print(f"{'case':24} {heads[0]:>20} {heads[1]:>8} {heads[2]:>16} {heads[3]:>6}")
    for case in CASES:
        print(
            f"{case:24} {median[case]:20.2f} {median[case] / median['plain']:8.3f} "
            f"{median[case + ' bytes']:16.1f} {median[case + ' quiet']:6.1%}"
        )


if __name__ == "__main__":
    main()
