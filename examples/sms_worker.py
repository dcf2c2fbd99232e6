"""An SMS-sending worker that caps every message with the four-rule recipient policy.

    python -m examples.sms_worker

A message goes out only if every rule allows it; a denied message consumed nothing, so it can
be retried later (here: dropped and counted). If the vendor call fails, the hit is refunded.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from freqguard import Guard, MemoryBackend, Policy, Rule

POLICY = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
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


@dataclass
class Tally:
    """What the worker did with a stream of messages."""

    sent: int = 0
    failed: int = 0  # the vendor call failed, and the hit was refunded
    capped: int = 0  # denied by the policy: nothing consumed
    capped_by: Counter[str] = field(default_factory=Counter)  # denials per rule

    def __str__(self) -> str:
        total = self.sent + self.failed + self.capped
        lines = [
            f"{total} messages: {self.sent} sent, {self.capped} capped, "
            f"{self.failed} failed at the vendor (refunded, so they used up no cap)"
        ]
        if self.capped_by:
            lines.append("capped by (a message may be capped by several rules):")
            lines += [f"  {rule:<12} {n:>5}" for rule, n in self.capped_by.most_common()]
        return "\n".join(lines)


def work(guard: Guard, messages: list[Message], seed: int = 1) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    for message in messages:
        decision = guard.hit("sms", recipient=message.recipient, content=message.body)
        if not decision.allowed:
            tally.capped += 1
            tally.capped_by.update(rule.id for rule in decision.denied_by)
            continue
        try:
            send_via_vendor(message, rng)
        except VendorError:
            guard.refund(decision)  # exactly what this hit took, in every rule
            tally.failed += 1
        else:
            tally.sent += 1
    return tally


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
