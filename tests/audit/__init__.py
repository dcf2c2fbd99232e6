"""The standing concurrency audit: production-shaped concurrency, real time, an exact model.

Worker processes, each with threads sharing one :class:`Guard` and, in some, asyncio tasks
sharing one :class:`AsyncGuard`, drive a mixed workload (:data:`POLICIES`: every strategy,
rules sharing a log, shadow rules, multi-part policies, leases taken and released (or left to
expire) beside a rate, costs above 1, ``hit_many``, refunds
of admitted decisions, per-key limits set, changed and cleared while hits run) at a few hot
keys, so that every limit is hit all the time. Time is the backend's own (no ``clock=``):
Redis ``TIME``, the memory backend's ``SystemClock``.

Every admission is logged with, per rule, the µs the backend recorded it at
(``decision.receipt.times_us``); a quarter of them are refunded (``guard.refund(decision)``)
0-400 ms later, and logged with the µs the refund was judged at. :func:`check_rules` then
takes, per rule and key, what stayed admitted and holds it to the rule's guarantee
(docs/strategies.md):

* sliding-log: at most ``limit`` units in any window ``(t - window, t]``. A refund takes back
  exactly that hit's units, so refunded admissions are left out.
* fixed-window: at most ``limit`` units per aligned window, refunded admissions left out.
* concurrency: at no µs more than ``limit`` leases held, each from when it was taken until
  its release or the end of its lease; a release leaves the policy's rate rules counting.
* a rule whose per-key limit changes under load (:data:`LIMITED`) is held to its guarantee
  at the largest of the rates it alternates between, never more.
* token-bucket and gcra: the stream replayed in time order conforms to GCRA
  (``tat = max(tat, t) + cost * I`` with ``tat - t <= burst * I``), refunds included: at the
  refund's time, the part of the hit's span still ahead is given back, the span being where
  earlier refunds moved it (:func:`check_bucket`). Also counted apart ("hard"): violations
  even with every refunded hit taken as never having happened.

:func:`check_times` checks that time per state never goes back: for one rule and key, a call judged
after another's admission there (the same thread's next call, or any call that started after
that one had answered, by the system-wide monotonic clock) carries no earlier time.

Processes are *spawned*, not forked: the parent (pytest, a benchmark) has threads and open
sockets that a fork would copy mid-flight, and a spawned worker starts, like a production
process, with its own interpreter and connection pools. The memory audit is one process:
memory state is shared only by the threads and tasks of the process that holds it.

The audit's modules: ``workload`` (the policies and what is logged), ``drivers`` (a thread's or
task's actions), ``runs`` (the processes, and the report) and ``checker`` (the guarantees held
to the logs). Their public names are this package's too.
"""

from __future__ import annotations

from tests.audit.checker import (
    RuleCheck,
    check_bucket,
    check_fixed,
    check_leases,
    check_rules,
    check_times,
    check_window,
    checked_rule,
)
from tests.audit.drivers import (
    Action,
    Driver,
    admission_times,
    adrive,
    arefund,
    drive,
    first_part,
    memory_backend,
    refund,
    reply_times,
)
from tests.audit.runs import (
    STARTUP_SECONDS,
    AuditConfig,
    AuditReport,
    Target,
    make_report,
    run_audit,
    worker,
)
from tests.audit.workload import (
    COSTS,
    HELD,
    LIMIT_SHARE,
    LIMITED,
    NO_REFUNDS,
    POLICIES,
    REFUND_DELAYS,
    VALUES,
    Admission,
    Refund,
    WorkerLog,
)

__all__ = [
    "COSTS",
    "HELD",
    "LIMITED",
    "LIMIT_SHARE",
    "NO_REFUNDS",
    "POLICIES",
    "REFUND_DELAYS",
    "STARTUP_SECONDS",
    "VALUES",
    "Action",
    "Admission",
    "AuditConfig",
    "AuditReport",
    "Driver",
    "Refund",
    "RuleCheck",
    "Target",
    "WorkerLog",
    "admission_times",
    "adrive",
    "arefund",
    "check_bucket",
    "check_fixed",
    "check_leases",
    "check_rules",
    "check_times",
    "check_window",
    "checked_rule",
    "drive",
    "first_part",
    "make_report",
    "memory_backend",
    "refund",
    "reply_times",
    "run_audit",
    "worker",
]
