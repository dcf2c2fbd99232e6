"""The exception tree of freqguard.

Every error freqguard raises derives from :class:`FreqGuardError`::

    FreqGuardError
    ├── ConfigError          bad rule, policy, URL, context or cost (also a ValueError)
    ├── CapExceeded          a hit was denied where the caller asked for an exception
    └── BackendUnavailable   the store failed; ``__cause__`` holds the original error
        └── PartialFailure   part of a batch failed (a cluster node), the rest answered
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from freqguard.decision import Decision

__all__ = [
    "BackendUnavailable",
    "CapExceeded",
    "ConfigError",
    "ContextError",
    "FreqGuardError",
    "PartialFailure",
    "extra_missing",
    "install",
    "raise_failures",
    "shown",
]


def shown(value: object, most: int = 80) -> str:
    """``repr(value)`` as a message shows a value the caller gave: cut short, and an integer
    of many digits by their count and sign (past 4,300 digits, Python refuses to print one)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        size = abs(value)
        digits = int(math.log10(size)) + 1  # log10 rounds 10**n - 1 up to n: checked
        digits += (size >= 10**digits) - (size < 10 ** (digits - 1))
        return f"{'a negative' if value < 0 else 'an'} integer of {digits} digits"
    try:
        text = repr(value)
    except ValueError:  # a container holding such an integer
        return f"a {type(value).__name__} holding an integer of more than 4,300 digits"
    except RecursionError:
        return f"a {type(value).__name__} nested too deep to show"
    except Exception:  # the value's own __repr__ failed: its type is what can be said
        return f"a {type(value).__name__} (its repr() raised)"
    return text if len(text) <= most else f"{text[: most - 20]}... ({len(text)} characters)"


def install(extra: str) -> str:
    """How to install an extra, as a message says it: freqguard is not on the package index
    yet, so from a checkout (a built wheel takes the extra too: ``"./freqguard-*.whl[x]"``)."""
    return f"pip install -e '.[{extra}]' in a checkout of freqguard (it is not on PyPI yet)"


def extra_missing(missing: ModuleNotFoundError, extra: str, who: str) -> ImportError:
    """The error for ``who`` (an integration's module) imported without ``extra``: naming
    the install when the module missing is the extra's own, else ``missing`` itself (one of
    its own dependencies is what is missing)."""
    if (missing.name or "").partition(".")[0] != extra:
        return missing
    return ImportError(f"{who} needs {extra}, an optional extra: {install(extra)}")


class FreqGuardError(Exception):
    """Base class of every error raised by freqguard."""


class ConfigError(FreqGuardError, ValueError):
    """A rule, policy, URL, context value or cost is invalid.

    The message names the bad value and what is allowed. Raised before any state changes;
    a store's refusal (a URL, a user or a bins setting that cannot work) once what its
    batch's other calls took is given back (``results``; units a failed give-back kept
    stay taken).

    Attributes:
        argument: the call's argument at fault, where it is one: ``cost``, ``rate``,
            ``ttl``, ``rule``, ``rules`` (``rules[1]``: one of those named), ``context``
            (the context as a whole) or one of its values by name (``context.recipient``;
            ``contexts[2].recipient`` in a batch); None otherwise.
        results: from a backend's ``execute_many`` whose calls the store refused in part
            (an ACL that allows some keys: Redis ``NOPERM``; a bin of another bins
            setting), each call's reply or error, in input order: the replies were
            applied, and a guard gives back what they took before it raises; None
            otherwise.
    """

    results: list[Any] | None = None

    def __init__(self, *args: object, argument: str | None = None) -> None:
        super().__init__(*args)
        self.argument = argument

    def in_batch(self, index: int) -> None:
        """Name the fault of a batch's context ``index`` by its place (``context.tz``:
        ``contexts[3].tz``); an argument not of the context stays as it is."""
        argument = self.argument
        if argument is not None and argument.startswith("context"):
            self.argument = f"contexts[{index}]{argument.removeprefix('context')}"

    def __reduce__(self) -> tuple[object, ...]:  # picklable, e.g. across process pools
        # not ``results``: replies, bound to their compiled policy, are for the engine only
        state = {name: v for name, v in self.__dict__.items() if name != "results"}
        return (type(self), self.args, state)


class ContextError(ConfigError):
    """A hit's context names a value the policy cannot decide with: a time zone it does not
    know, a priority it does not have, or none where a rule needs one.

    The HTTP integrations answer it 400 (the request's own values), not 500.
    """


class CapExceeded(FreqGuardError):
    """A hit was denied (or could not be had within a timeout).

    Attributes:
        decision: the :class:`~freqguard.Decision` that denied it, with ``retry_after``.
    """

    def __init__(self, decision: Decision, message: str | None = None) -> None:
        self.decision = decision
        if message is None:
            names = ", ".join(rule.id for rule in decision.denied_by) or "?"
            message = (
                f"policy {decision.policy!r} denied by {names}; "
                f"retry after {decision.retry_after:.3f}s"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:  # picklable, e.g. across process pools
        return (type(self), (self.decision, str(self)))


class BackendUnavailable(FreqGuardError):
    """The state store could not be reached or failed; the cause is chained.

    Attributes:
        answered: the store replied, with an error (e.g. out of memory): it is up, so the
            circuit breaker does not count the failure (an admission its replicas did not
            acknowledge is counted: the node cannot give what ``wait_replicas`` asks).
        sent: the call may have reached the store, and may still be applied there (a call
            that timed out can run when a hung server resumes); false only when it surely
            did not (a refused connection, an open circuit, a full memory backend).
        node: the store node that failed, when the backend names nodes (a Redis Cluster
            node's ``host:port``, as its ``node_of`` does) and knew it as the call failed.
        applied: the store's own answer to a call it applied when the failure came after
            (an admission its replicas did not acknowledge, ``wait_replicas``), else None;
            a hit on several parts goes on with it, so that a later part's denial is still
            answered as one.
    """

    answered = False
    sent = True
    node: object = None
    applied: Any = None

    def __init__(self, *args: object, answered: bool = False, sent: bool = True) -> None:
        super().__init__(*args)
        self.answered, self.sent = answered, sent

    def __reduce__(self) -> tuple[object, ...]:  # picklable, e.g. across process pools
        # not ``applied``: a reply, bound to its compiled policy, is for the engine only
        state = {"answered": self.answered, "sent": self.sent, "node": self.node}
        return (type(self), self.args, state)


class PartialFailure(BackendUnavailable):
    """Part of a batch failed and the rest was answered: some Redis Cluster nodes answered,
    others did not (or their circuits are open). What was answered was applied.

    A backend's ``execute_many`` raises it with each call's reply or error;
    ``Guard.hit_many`` with ``on_error="raise"`` raises it with each hit's
    :class:`~freqguard.Decision` or error (any other ``on_error`` answers the failed hits
    by itself and the rest from the store).

    Attributes:
        results: per item, in input order, its answer or the
            :class:`BackendUnavailable` it got.
        sent: true when any item was answered (applied) or may have been (a failure after
            the call was sent): a refund that failed in part may have given back some of
            its units, so its receipt stays spent.
    """

    def __init__(self, message: str, results: list[Any]) -> None:
        errors = [r for r in results if isinstance(r, BackendUnavailable)]
        super().__init__(
            message,
            answered=all(e.answered for e in errors),
            sent=len(errors) < len(results) or any(e.sent for e in errors),
        )
        self.results = results

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.results))

    @property
    def errors(self) -> list[BackendUnavailable]:
        """The distinct errors among the results, in order."""
        seen: dict[int, BackendUnavailable] = {}
        for result in self.results:
            if isinstance(result, BackendUnavailable):
                seen.setdefault(id(result), result)
        return list(seen.values())


def raise_failures(results: list[Any], what: str) -> None:
    """Raise what failed among ``results`` (answers and :class:`BackendUnavailable`), if
    anything did: one failure every item got, as it is; else a :class:`PartialFailure` of
    them all, saying how many of ``what`` (``"hits"``, ``"calls"``) failed."""
    failed = [result for result in results if isinstance(result, BackendUnavailable)]
    if not failed:
        return
    first = failed[0]
    if all(result is first for result in results):  # one failure, everyone's
        raise first
    others = ", the others answered" if len(failed) < len(results) else ""
    raise PartialFailure(
        f"{len(failed)} of {len(results)} {what} failed{others}: {first}", results
    ) from first
