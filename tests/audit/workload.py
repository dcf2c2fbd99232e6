"""The audit's workload: the policies its drivers hit, the limits they set and the refunds
they make (:data:`POLICIES`, :data:`LIMITED`), and what a driver logs of each admission and
refund."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from freqguard import (
    Policy,
    Rule,
)

# -- the workload --------------------------------------------------------------------------

POLICIES: tuple[Policy, ...] = (
    Policy("log", Rule("8/second", by="user")),
    Policy(
        "shared",  # two rules on one log, a finer rule and a shadow beside them, one part
        Rule("5/second", by="user", name="user-1s"),
        Rule("12 per 3 seconds", by="user", name="user-3s"),
        Rule("3 per 2 seconds", by=("user", "content"), name="content-2s"),
        Rule("4/second", by="user", strategy="gcra", name="shadow", shadow=True),
    ),
    Policy("fixed", Rule("10/second", by="user", strategy="fixed-window")),
    Policy("bucket", Rule("20 per 2 seconds", by="user", strategy="token-bucket", burst=6)),
    Policy("gcra", Rule("10/second", by="user", strategy="gcra", burst=4)),
    Policy(  # the case: a global cap and a per-user cap on two parts
        "global", Rule("30 per 2 seconds", name="all"), Rule("5/second", by="user", name="user")
    ),
    Policy(
        "mixed",  # two parts, three strategies
        Rule("25/second", strategy="gcra", burst=8, name="all"),
        Rule("6/second", by="user", strategy="fixed-window", name="user"),
        Rule("3/second", by=("user", "content"), name="content"),
    ),
    Policy("slow", Rule("50 per 20 seconds", by="user")),
    Policy(  # per-key limits set, changed and cleared while hits run (LIMITED)
        "limited",
        Rule("6/second", by="user", name="user"),
        Rule("3 per 2 seconds", by=("user", "content"), name="content"),
        Rule("8/second", by="user", strategy="fixed-window", name="fixed"),
    ),
    Policy("limited-gcra", Rule("6/second", by="user", strategy="gcra", name="user")),
    Policy(  # calls in flight: leases taken by take_lease, released (or left to expire)
        "leases",
        Rule("3 concurrent", by="user", lease=0.3, name="held"),
        Rule("20/second", by="user", name="rate"),
    ),
)
#: Per (policy, rule): the rates a per-key limit alternates between, with the rule's own
#: (a cleared limit), for a user, while hits run. The same window, so the guarantee checked
#: is the rule's at the largest of the limits (:func:`checked_rule`).
LIMITED: dict[tuple[str, str], tuple[str, ...]] = {
    ("limited", "user"): ("12/second", "3/second"),
    ("limited", "content"): ("6 per 2 seconds", "4 per 2 seconds"),
    ("limited", "fixed"): ("16/second", "3/second"),
    ("limited-gcra", "user"): ("12/second", "3/second"),
}
LIMIT_SHARE = 0.02  # of actions, a set_limit or clear_limit
#: Policies whose admissions are never refunded. A multi-part hit denied by a later part
#: gives back what the earlier parts took; on a bucket, after other hits, that can leave the
#: engine's arrival time later than a replay that never saw the denied hit. Without refunds
#: that only makes the replay more lenient; with them its marks could differ.
NO_REFUNDS = frozenset({"mixed"})
VALUES = {"user": ("u0", "u1", "u2"), "content": ("c0", "c1")}
COSTS = (1, 1, 1, 1, 2, 3)
HELD = 8  # admitted decisions a thread or task holds for a refund (then the first is due)
REFUND_DELAYS = (0.0, 0.0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.4)  # seconds

_BY_NAME = {p.name: p for p in POLICIES}


# -- what is logged ------------------------------------------------------------------------


class Admission(NamedTuple):
    aid: int  # worker << 32 | seq
    seq: int  # order within the worker
    policy: str
    times: tuple[int, ...]  # per rule: the µs it was recorded at
    cost: int
    ctx: tuple[str, ...]  # the dimension values, in policy.dimensions order
    took: int  # bit i: rule i consumed (a shadow rule only when it admitted)
    start: int  # time.monotonic_ns() before the call and after its answer
    end: int


class Refund(NamedTuple):
    aid: int  # the admission it gave back
    seq: int
    times: tuple[int, ...]  # per rule: the µs the refund was judged at
    start: int
    end: int


@dataclass
class WorkerLog:
    """What one thread or task did and saw."""

    worker: int
    admissions: list[Admission] = field(default_factory=list)
    refunds: list[Refund] = field(default_factory=list)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
