"""The SMS policy: one decision per message, on every rule at once."""

from __future__ import annotations

from freqguard import Policy, QuietHours, Rule

SMS = Policy(
    "celery-sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
    # the vendor's limit, one for all recipients and workers: at most 200 in any second
    Rule("200/second", name="vendor"),
    priorities=("transactional", "marketing"),
    quiet=QuietHours("21:00", "08:00", tz_from="tz", exempt=("transactional",)),
)
