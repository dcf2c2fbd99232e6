"""What a receipt was made by: a plan's *fingerprint*, which a refund or a release must find
again, or it is refused (its units counted by rules that are no longer those).
"""

from __future__ import annotations

from collections.abc import Sequence

from freqguard.decision import Receipt
from freqguard.policy import Policy
from freqguard.script.calls import Part, spec_text

__all__ = ["fingerprint", "holds_alike", "made_by"]


def fingerprint(policy: Policy, parts: Sequence[Part]) -> str:
    """The parts' specs and states (strategies, capacities, windows, rule ids, dimensions),
    and what a call's parts are chosen by beside them (:meth:`PolicyPlan.parts_for`):
    what the policy reads from a context (priorities, each hit's zone), its rules' fixed
    zones, priorities and caps, and its quiet hours. A deploy that changes any of them
    makes another plan, so a receipt of the old one never goes back by one that asks its
    context for what the take never had (a priority, a zone). Its first line is what its
    leases are held by, whatever their numbers (:func:`holds_alike`)."""
    rules = tuple((r.tz, r.only, r.caps) for r in policy.rules)
    chosen = f"#{(policy.reads, policy.priorities, rules, policy.quiet)!r}"
    keys = ["@" + ",".join(layout.key_id for layout in part.layouts) for part in parts]
    held = (
        ",".join(str(spec.twin.code) for spec in part.specs) + f"/{part.layouts[0].bins}"
        for part in parts  # the bins too: a binned fallback's records are elsewhere
    )
    first = "|".join(h + k for h, k in zip(held, keys, strict=True)) + chosen
    # the second line is the whole fingerprint of the releases before 0.3.1: theirs match it
    specs = (spec_text(p.specs, kept=False) for p in parts)
    return first + "\n" + "|".join(t + k for t, k in zip(specs, keys, strict=True))


def made_by(receipt: Receipt, fingerprint: str, leased: Sequence[Sequence[bool]]) -> bool:
    """Whether ``receipt`` goes back by the plan of that ``fingerprint`` (``leased``: which
    of its states hold leases): its own, or one an older release made of it (the specs and
    keys alone: a pickled decision across an upgrade), or one that holds its leases alike
    (:func:`holds_alike`)."""
    given = receipt.fingerprint
    if given == fingerprint or given == fingerprint.partition("\n")[2]:
        return True
    return holds_alike(receipt, fingerprint, leased)


def holds_alike(receipt: Receipt, fingerprint: str, leased: Sequence[Sequence[bool]]) -> bool:
    """Whether ``receipt`` gives back leases only (a release's), held as the plan of that
    ``fingerprint`` and ``leased`` (its states holding leases) holds them: each state's
    strategy and key the same, whatever the limits and leases (a process deployed with a
    raised limit since the take, which never had the plan it was taken under). A lease is
    a time in a log: given back by its mark alike."""
    if not leased or receipt.fingerprint.partition("\n")[0] != fingerprint.partition("\n")[0]:
        return False
    if len(receipt.marks) != len(leased):  # a receipt made otherwise: refused, never a crash
        return False
    return all(
        len(marks) == len(held)
        and all(mark is None or lease for mark, lease in zip(marks, held, strict=True))
        for marks, held in zip(receipt.marks, leased, strict=True)  # lengths checked
    )
