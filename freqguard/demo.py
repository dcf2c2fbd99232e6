"""The main demo: a burst of SMS through the four-rule policy, on the in-memory backend.

Run it with ``freqguard demo`` (or ``python -m freqguard demo``). Time is simulated with a
:class:`~freqguard.ManualClock`, so the hour of traffic it shows takes no time at all.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from freqguard import (
    CapExceeded,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    backend_from_url,
)

SMS_POLICY = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
    Rule("5 per 59 minutes", by=("recipient", "content"), name="content-59m"),
)


PUSH_POLICY = Policy(
    "push",
    Rule("3/day", by="recipient", name="day", calendar=True, tz_from="tz", caps={"marketing": 2}),
    priorities=("transactional", "marketing"),
    quiet=QuietHours("21:00", "08:00", tz_from="tz", exempt=("transactional",)),
)
BERLIN = ZoneInfo("Europe/Berlin")


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


def _backend(url: str | None) -> tuple[Any, str]:
    """The demo's store: in memory, or the one ``url`` names under a prefix of this run's
    own (whose keys :func:`_close` deletes)."""
    if url is None:
        return MemoryBackend(), "fg"
    return backend_from_url(url), f"fgdemo-{secrets.token_hex(4)}"


def _close(guard: Guard, backend: Any, prefix: str) -> None:
    """The scene's guard closed, and on a store, every key it wrote deleted: a demo leaves
    nothing behind."""
    if not isinstance(backend, MemoryBackend):
        from freqguard.cli.store import delete_keys

        delete_keys(backend.client, prefix, really=True)
    guard.close()


def main(url: str | None = None) -> None:
    """Print the demo's two scenes, on the memory backend or the store ``url`` names."""
    clock = ManualClock(1_700_000_000)
    backend, prefix = _backend(url)
    guard = Guard(backend, [SMS_POLICY], clock=clock, prefix=prefix)
    header = ("time", "recipient", "content", "result", "blocked by", "left*", "retry in")
    table = [header, *rows(guard, clock)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print("freqguard demo: the SMS policy (per recipient 15/minute and 50/day; per recipient")
    where = (
        "in-memory backend" if url is None else f"on {url.partition('://')[0]}://, prefix {prefix}"
    )
    print(f"and content 2 per 59 seconds and 5 per 59 minutes), {where}\n")
    for n, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * width for width in widths))
    sent = sum(1 for row in table[1:] if row[3] == "sent")
    print(f"\n{sent} sent, {len(table) - 1 - sent} blocked; a blocked message consumed nothing.")
    print("* left: what the tightest rule still admits for that recipient and content.")
    _close(guard, backend, prefix)
    messaging(url)


def messaging(url: str | None = None) -> None:
    """The messaging scene: dana's evening in Berlin, on a push policy of 3 a local day
    (marketing at most 2 of them), quiet from 21:00 to 08:00 her time but for transactional
    messages."""
    clock = ManualClock(datetime(2026, 6, 11, 21, 30, tzinfo=BERLIN).timestamp())
    backend, prefix = _backend(url)
    guard = Guard(backend, [PUSH_POLICY], clock=clock, prefix=prefix)
    print("\nMessaging: dana in Berlin; 3 pushes a local day, marketing at most 2 of them;")
    print("quiet 21:00-08:00 her time, transactional messages exempt\n")
    sends = [
        ("transactional", "Your code is 5678", 0.0),
        ("marketing", "Flash sale tonight", 300.0),
        ("marketing", "New arrivals", 0.0),
        ("marketing", "Last chance", 60.0),
        ("transactional", "Your parcel is out", 240.0),
    ]
    for priority, text, later in sends:
        clock.advance(later)
        ctx: dict[str, Any] = {"recipient": "dana", "tz": "Europe/Berlin", "priority": priority}
        asked = _local(clock)
        try:
            decision = guard.acquire("push", timeout=12 * 3600, **ctx)
        except CapExceeded as exc:
            by = ", ".join(rule.id for rule in exc.decision.denied_by)
            print(f"  {asked}  {priority:13}  {text:20}  BLOCKED by {by}")
            continue
        when = _local(clock)
        note = "sent" if when == asked else f"deferred to {when} (quiet hours)"
        print(f"  {asked}  {priority:13}  {text:20}  {note}")
        assert decision.allowed
    print("\nThe OTP went out in the quiet hours; the sale waited for the morning; marketing")
    print("stopped at its 2 of Friday's 3, and the parcel notice took the third.")
    _close(guard, backend, prefix)


def _local(clock: ManualClock) -> str:
    return datetime.fromtimestamp(clock.now(), BERLIN).strftime("%a %H:%M")
