"""The main demo: a burst of SMS through the four-rule policy, on the in-memory backend.

Run it with ``freqguard demo`` (or ``python -m freqguard demo``). Time is simulated with a
:class:`~freqguard.ManualClock`, so the hour of traffic it shows takes no time at all.
"""

from __future__ import annotations

from collections.abc import Iterator

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule

SMS_POLICY = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="recipient-15-per-min"),
    Rule("50/day", by="recipient", name="recipient-50-per-day"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-2-per-59s"),
    Rule("5 per 59 minutes", by=("recipient", "content"), name="content-5-per-59min"),
)


def _traffic() -> Iterator[tuple[float, str, str]]:
    """(seconds since start, recipient, content) of the demo's messages."""
    # alice asks for her login code three times in ten seconds, then once more a minute later
    yield from [(0.0, "alice", "Your code is 1234"), (4.0, "alice", "Your code is 1234")]
    yield (10.0, "alice", "Your code is 1234")
    yield (64.0, "alice", "Your code is 1234")
    # a campaign sends bob 16 different messages within one minute
    yield from ((20.0 + 2 * n, "bob", f"Deal #{n}: 20% off") for n in range(16))
    # carol's shipment reminder repeats every 70 s: the hourly content rule stops the sixth
    yield from ((100.0 + 70 * n, "carol", "Your parcel arrives today") for n in range(6))


def rows(guard: Guard, clock: ManualClock) -> Iterator[tuple[str, ...]]:
    start = clock.now()
    for at, recipient, content in sorted(_traffic()):
        clock.set(start + at)
        d = guard.hit("sms", recipient=recipient, content=content)
        blocked = ", ".join(rule.id for rule in d.denied_by)
        yield (
            f"+{at:5.0f}s",
            recipient,
            content,
            "sent" if d.allowed else "BLOCKED",
            blocked or "-",
            str(d.remaining),
            f"{d.retry_after:.0f}s" if not d.allowed else "-",
        )


def main() -> None:
    clock = ManualClock(1_700_000_000)
    guard = Guard(MemoryBackend(), [SMS_POLICY], clock=clock)
    header = ("time", "recipient", "content", "result", "blocked by", "left*", "retry in")
    table = [header, *rows(guard, clock)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print("freqguard demo: the SMS policy (per recipient 15/minute and 50/day; per recipient")
    print("and content 2 per 59 seconds and 5 per 59 minutes), in-memory backend\n")
    for n, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * width for width in widths))
    sent = sum(1 for row in table[1:] if row[3] == "sent")
    print(f"\n{sent} sent, {len(table) - 1 - sent} blocked; a blocked message consumed nothing.")
    print("* left: what the tightest rule still admits for that recipient and content.")
