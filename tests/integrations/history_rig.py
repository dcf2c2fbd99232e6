"""What the decision history tests share (``test_service_history.py``,
``test_service_history_served.py``, ``test_service_history_redis.py``): a policy of two
rules, a minute's start, an answer's series by policy and rule, and a context's key in the
keys denied most (its digest)."""

from __future__ import annotations

from typing import Any

from freqguard import Policy, Rule
from freqguard.script.keys import context_digest

SMS = Policy(
    "sms",
    Rule("2/minute", by="recipient", name="rcpt-1m"),
    Rule("3 per 59 seconds", by=("recipient", "content"), name="content-59s"),
)
START = 1_700_000_040  # a minute's start


def _series(answer: dict[str, Any]) -> dict[tuple[str, str | None], tuple[list[int], list[int]]]:
    return {(s["policy"], s["rule"]): (s["allowed"], s["denied"]) for s in answer["series"]}


def _digest(recipient: str, content: str = "x") -> str:
    """A context's key in the keys denied most: its digest, never its values."""
    return context_digest({"recipient": recipient, "content": content}, SMS.dimensions)
