"""An SMS-sending worker that caps every message with the four-rule recipient policy.

    python -m examples.sms_worker

A message goes out only if every rule allows it; a denied message consumed nothing, so it can
be retried later (here: dropped and counted). If the vendor call fails, the hit is refunded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from freqguard import Guard, MemoryBackend, Policy, Rule

POLICY = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-minute"),
    Rule("50/day", by="recipient", name="rcpt-day"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
    Rule("5 per 59 minutes", by=("recipient", "content"), name="content-59m"),
)


@dataclass(frozen=True)
class Message:
    recipient: str
    body: str


class VendorError(Exception):
    pass


def send_via_vendor(message: Message, rng: random.Random) -> None:
    if rng.random() < 0.01:
        raise VendorError("vendor timed out")


def work(guard: Guard, messages: list[Message], seed: int = 1) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"sent": 0, "capped": 0, "failed": 0}
    for message in messages:
        decision = guard.hit("sms", recipient=message.recipient, content=message.body)
        if not decision.allowed:
            counts["capped"] += 1
            continue
        try:
            send_via_vendor(message, rng)
        except VendorError:
            guard.refund(decision)  # exactly what this hit took, in every rule
            counts["failed"] += 1
        else:
            counts["sent"] += 1
    return counts


def main() -> None:
    rng = random.Random(7)
    messages = [
        Message(f"+1555000{rng.randrange(50):04d}", rng.choice(["Your code is 1234", "Hi!"]))
        for _ in range(2_000)
    ]
    guard = Guard(MemoryBackend(), [POLICY])
    print(work(guard, messages))


if __name__ == "__main__":
    main()
