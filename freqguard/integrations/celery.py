"""Celery tasks capped by a policy: ``@capped_task(app, "sms", guard=guard)``.

::

    @capped_task(app, SMS, guard=guard)
    def send_sms(recipient: str, content: str) -> None: ...

    send_sms.delay(recipient="+15550100", content="Your code is 1234")

The task's arguments are the hit's context: those named after the policy's dimensions
(``by``) and what it reads (``tz_from`` zones, ``priority``, ``rate_for`` inputs), sent as
keywords (or positionally, or left to the parameter's default). Each run hits the policy
once, before the body:

* allowed: the body runs; if it raises (a ``self.retry`` or ``Reject`` included), the hit is
  refunded (``guard.refund(decision)``) and the exception goes on, so a retried or requeued
  task counts once, when it runs again (Celery's ``Ignore``, "done, record no state", counts
  as a return does);
* denied, by ``on_denied``: ``"defer"`` sends the task again for when the decision frees
  (``retry_after``: the window's turn, or the end of quiet hours), with the same id, the same
  arguments and the same ``request.retries``, so deferrals never spend ``max_retries``;
  a turn past the task's ``expires`` revokes it instead; ``"drop"`` returns a
  :class:`Dropped` result without running and logs it; ``"raise"`` raises
  :class:`TaskDenied` (a :class:`~freqguard.CapExceeded`), which the worker logs as an
  expected error, ``autoretry_for`` does not retry, and a JSON result backend gives back as
  itself.

With ``acks_late`` the broker delivers a task again when its worker died mid-body; the hit
that delivery took is tied to the task id (a one-per-task once-hit on the same guard, see
docs/celery.md; a ``self.replace`` replacement, which keeps the id, is tied apart), so the
redelivery does not take a second one. A policy that counts calls
in flight (a concurrency rule) is decided otherwise: each run holds a lease while its body
runs, and a redelivery takes a lease, and its rate rules' units, of its own (the strict
side: the lost run's call counts too).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict, cast

from freqguard.errors import extra_missing, shown

try:  # the extra named (an ImportError saying how to install it)
    from celery import Celery, Task
except ModuleNotFoundError as missing:
    raise extra_missing(missing, "celery", __name__) from missing
from celery.exceptions import Ignore

from freqguard.decision import Decision
from freqguard.errors import CapExceeded, ConfigError, ContextError, FreqGuardError
from freqguard.guard import Guard
from freqguard.integrations._celery_checks import check_options, check_signature, raise_options
from freqguard.integrations._celery_resend import Deferred, defer
from freqguard.policy import Policy
from freqguard.rules import Rule

__all__ = [
    "ON_DENIED",
    "TASK_ONCE",
    "Deferred",
    "Dropped",
    "OnDenied",
    "TaskDenied",
    "capped_task",
]

_log = logging.getLogger("freqguard.celery")

OnDenied = Literal["defer", "drop", "raise"]
#: the allowed values of ``on_denied``
ON_DENIED: tuple[OnDenied, ...] = ("defer", "drop", "raise")

#: The policy that ties a hit to a task id for tasks with ``acks_late``: one once-hit per task id
#: a day (a redelivery comes within the broker's visibility or consumer timeout, an hour or
#: less by default). capped_task registers it on its guard.
TASK_ONCE = Policy("freqguard-celery-task", Rule("1/day", by="task_id", name="taken"))


class Dropped(TypedDict):
    """What a task dropped by its cap returns (JSON-serialisable, for any result backend)."""

    dropped: Literal[True]
    policy: str
    denied_by: list[str]
    retry_after: float


class TaskDenied(CapExceeded):
    """What a task capped with ``on_denied="raise"`` raises: a denial by design, which the
    worker logs as an expected error (INFO, without a traceback: it is in the task's
    ``throws``), and which a result backend that sends JSON gives back as itself
    (``result.get()`` raises ``TaskDenied``, a ``CapExceeded``, not a bare ``Exception``).

    Attributes:
        policy: the policy's name.
        denied_by: the ids of the rules that denied.
        retry_after: seconds until the task would be admitted.
        decision: the worker's :class:`~freqguard.Decision`; None where the exception was
            rebuilt from its message (a JSON result carries that, not the decision).
    """

    decision: Decision | None  # type: ignore[assignment]

    def __init__(self, decision: Decision | str | None, message: str | None = None) -> None:
        if isinstance(decision, Decision):
            super().__init__(decision, message)
            self.policy, self.retry_after = decision.policy, decision.retry_after
            self.denied_by = [rule.id for rule in decision.denied_by]
            return
        text = message if decision is None and message is not None else str(decision)
        FreqGuardError.__init__(self, text)  # rebuilt from its message (a JSON result)
        self.decision = None
        found = _DENIED.fullmatch(text)
        self.policy = ast.literal_eval(found["policy"]) if found else ""
        self.denied_by = found["rules"].split(", ") if found else []
        self.retry_after = float(found["wait"]) if found else 0.0


#: CapExceeded's message, which a JSON result keeps
_DENIED = re.compile(
    r"policy (?P<policy>'[^'\\]*'|\"[^\"\\]*\") denied by (?P<rules>.*); "
    r"retry after (?P<wait>[0-9]+(?:\.[0-9]+)?)s"
)


def capped_task(
    app: Celery,
    policy: Policy | str,
    *,
    guard: Guard,
    on_denied: OnDenied = "defer",
    **task_options: Any,
) -> Callable[[Callable[..., Any]], Task]:
    """Register the decorated function as a Celery task that hits ``policy`` before each run.

    Args:
        app: the Celery app the task is registered on (``app.task``).
        policy: a Policy (registered on ``guard`` here) or the name of one registered on it.
        guard: the :class:`~freqguard.Guard` that decides (its backend: Redis, for a cap
            that holds across workers).
        on_denied: ``"defer"`` (send again at ``retry_after``), ``"drop"`` or ``"raise"``.
        task_options: passed to ``app.task`` (``name``, ``acks_late``, ``max_retries``...);
            ``bind=True`` gives the function the task as its first argument, as in Celery.

    Raises:
        ConfigError: at decoration, an ``on_denied`` not among :data:`ON_DENIED`, a guard
            that is not a sync ``Guard``, a policy name it does not know, a function that
            cannot take one of the policy's dimensions as a keyword argument, an
            ``async def`` (Celery runs a task's function sync), Celery's per-worker
            ``rate_limit`` (a rule of the policy caps every worker), or
            ``autoretry_for=(CapExceeded,)`` with ``on_denied="raise"`` (that is ``"defer"``).
    """
    if not callable(getattr(app, "task", None)):
        raise ConfigError(f"app must be a Celery app (Celery('proj')), got {shown(app, 60)}")
    if not isinstance(on_denied, str) or on_denied not in ON_DENIED:
        allowed = ", ".join(repr(value) for value in ON_DENIED)
        raise ConfigError(f"on_denied must be one of {allowed}, got {shown(on_denied)}")
    check_options(app, task_options)
    if on_denied == "raise":  # a denial by design: no traceback, no retry on Celery's back-off
        raise_options(app, task_options, TaskDenied)
    if not isinstance(guard, Guard):
        raise ConfigError(
            f"guard must be a freqguard Guard (Celery runs tasks sync), got {shown(guard)}"
        )
    resolved = _policy(guard, policy)
    guard.add_policy(TASK_ONCE)  # for acks_late, known only when the task runs
    bind = bool(task_options.pop("bind", False))

    def decorate(fn: Callable[..., Any]) -> Task:
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise ConfigError(
                f"async def {fn.__name__}: Celery runs a task's function sync, so its "
                "body would never run (the hit spent on a coroutine nobody awaits); make "
                "it a def that runs the coroutine, asyncio.run(...)"
            )
        params = list(inspect.signature(fn).parameters.values())[1 if bind else 0 :]
        signature = inspect.Signature(params)
        check_signature(fn, signature, resolved)
        cap = _Cap(guard, resolved, on_denied, signature)

        @functools.wraps(fn)
        def run(self: Task, *args: Any, **kwargs: Any) -> Any:
            return cap.run(self, fn, bind, args, kwargs)

        task_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        run.__signature__ = signature.replace(parameters=[task_param, *params])  # type: ignore[attr-defined]
        del run.__wrapped__  # Celery checks arguments against the signature above, not fn's
        return cast(Task, app.task(bind=True, **task_options)(run))

    return decorate


def _policy(guard: Guard, policy: Policy | str) -> Policy:
    if isinstance(policy, Policy):
        guard.add_policy(policy)  # an equal one registered already: a no-op
        return policy
    if isinstance(policy, str) and policy in guard.policies:
        return guard.policies[policy]
    known = ", ".join(sorted(guard.policies)) or "none"
    rate = isinstance(policy, str) and "/" in policy  # a rate: a rule of a policy
    hint = f": a rate is a rule, Policy('sends', Rule({shown(policy)}, by=...))" if rate else ""
    raise ConfigError(
        f"policy must be a Policy or the name of one registered on the guard "
        f"(registered: {known}), got {shown(policy)}{hint}"
    )


class _Cap:
    """One capped task's decision around each run; no per-run state."""

    def __init__(
        self, guard: Guard, policy: Policy, on_denied: OnDenied, signature: inspect.Signature
    ) -> None:
        self.guard, self.policy, self.on_denied = guard, policy, on_denied
        self.names = (*policy.dimensions, *policy.reads)
        self.signature = signature  # the function's, without the task of ``bind=True``
        kinds = inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL
        self.var_keyword = {p.name for p in signature.parameters.values() if p.kind in kinds}

    def context(
        self, task: Task, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The hit's context: the arguments named after the policy's dimensions and reads
        (keywords, positional ones by their parameters' names, or the parameters' defaults)."""
        named = kwargs
        if args or not all(name in kwargs for name in self.names):  # binding costs ~10 µs
            bound = self.signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments.items()
            named = {**{k: v for k, v in given if k not in self.var_keyword}, **kwargs}
        missing = [d for d in self.policy.dimensions if d not in named]
        if missing:
            raise ContextError(
                f"task {task.name!r} (policy {self.policy.name!r}): no argument for the "
                f"dimension(s) {', '.join(missing)}; send them as keywords, e.g. "
                f".delay({missing[0]}=...)"
            )
        return {name: named[name] for name in self.names if name in named}

    def run(
        self,
        task: Task,
        fn: Callable[..., Any],
        bind: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        context = self.context(task, args, kwargs)

        def body() -> Any:
            try:
                return fn(task, *args, **kwargs) if bind else fn(*args, **kwargs)
            except Ignore as done:  # Celery's "done, record no state" (a result stored by
                return _Ignored(done)  # hand, a replace): counted as a return, then raised

        policy = self.guard.policies.get(self.policy.name, self.policy)  # as deployed now
        if policy.leases:  # calls in flight: a lease held while the body runs
            return self.run_leased(task, body, context)
        decision = self.guard.hit(self.policy.name, **context)
        if not decision.allowed:
            return self.denied(task, decision)
        taken = [decision]
        try:
            if _tied(task):
                once = self.guard.hit(TASK_ONCE.name, task_id=_tie(task))
                if once.allowed:
                    taken.append(once)
                else:  # a redelivery: an earlier delivery holds this task's hit
                    taken = []
                    self.guard.refund(decision)
            result = body()
        except BaseException:
            self.refund(task, taken)
            raise
        return _done(result)

    def run_leased(self, task: Task, body: Callable[[], Any], context: Mapping[str, Any]) -> Any:
        """The body under a lease (with the policy's rate rules, all or nothing): given back
        when it returns, the call counted; refunded whole when it raises, as a failing
        body's hit is. (A redelivery takes its own: the one a lost worker held frees itself
        after the rule's ``lease``.)"""
        decision = self.guard.take_lease(self.policy.name, **context)
        if not decision.allowed:
            return self.denied(task, decision)
        try:
            result = body()
        except BaseException:
            try:
                self.refund(task, [decision])
            finally:  # refused (a deploy since the take: its rate units are the new
                receipt = decision.receipt  # policy's), or cut as it began (a Ctrl-C, the
                if receipt is not None and not receipt.spent:  # soft time limit): its
                    with contextlib.suppress(FreqGuardError):  # lease goes back all the same
                        self.guard.release(decision)
            raise
        try:
            self.guard.release(decision)
        except FreqGuardError:  # the body ran: its lease frees itself after the rule's lease
            _log.exception("task %s[%s]: release failed", task.name, task.request.id)
        except BaseException:  # a Ctrl-C as the release began, before it held one back
            with contextlib.suppress(FreqGuardError):  # given back by then: said so
                self.guard.release(decision)
            raise
        return _done(result)

    def refund(self, task: Task, taken: list[Decision]) -> None:
        """Give back what a failed run took; a refund that fails is logged, and the body's
        exception goes on (the units stay taken: the strict side of the cap)."""
        for decision in taken:
            try:
                self.guard.refund(decision)
            except ConfigError as exc:  # refused (a deploy since the take): no fault here
                _log.warning("task %s[%s]: not refunded: %s", task.name, task.request.id, exc)
            except Exception:
                _log.exception("task %s[%s]: refund failed", task.name, task.request.id)

    def denied(self, task: Task, decision: Decision) -> Any:
        if self.on_denied == "raise":
            raise TaskDenied(decision)
        names = [rule.id for rule in decision.denied_by]
        if self.on_denied == "drop":
            _log.info(
                "task %s[%s] dropped: policy %r denied by %s",
                task.name,
                task.request.id,
                self.policy.name,
                ", ".join(names),
            )
            return Dropped(
                dropped=True,
                policy=decision.policy,
                denied_by=names,
                retry_after=decision.retry_after,
            )
        return defer(task, decision, names)


def _tied(task: Task) -> bool:
    """Whether a run's hit is tied to its task id: a task the broker may deliver again
    after its body began (``acks_late``), run by a worker (an id; not eager, not a call)."""
    request = task.request
    return bool(task.acks_late and request.id and not (request.is_eager or request.called_directly))


def _tie(task: Task) -> str:
    """What a run's once-hit is keyed by: its task id, and how many replacements deep it
    is (``self.replace`` hands the task id on, its replacement a run of its own; a
    redelivery keeps the depth)."""
    request = task.request
    depth = request.get("replaced_task_nesting") or 0
    return f"{request.id}" if not depth else f"{request.id}+{depth}"


class _Ignored:
    """What a body that raised Celery's ``Ignore`` ran to: its hit kept (the call was made,
    and nothing runs it again), the exception raised once the run is done."""

    def __init__(self, done: Ignore) -> None:
        self.done = done


def _done(result: Any) -> Any:
    if isinstance(result, _Ignored):
        raise result.done
    return result
