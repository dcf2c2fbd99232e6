"""How ``capped_task`` sends a denied task again (``on_denied="defer"``): the same request
at ``retry_after``, its ``retries`` unchanged; revoked instead when that turn comes after the
task expires (Celery would hold the copy until then, only to revoke it); returned as a
:class:`Deferred` when run eagerly or called as a function, where nothing is sent."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from celery import Task
from celery.exceptions import Ignore, Retry
from celery.signals import task_revoked
from celery.utils.time import maybe_iso8601, maybe_make_aware

from freqguard.decision import Decision

__all__ = ["Deferred", "defer"]

_log = logging.getLogger("freqguard.celery")


class Deferred(TypedDict):
    """What a deferred task returns when run eagerly (``task_always_eager`` or ``apply``,
    where Celery would run a re-sent task at once, whatever its countdown) or called as a
    function: it is not re-sent."""

    deferred: Literal[True]
    policy: str
    denied_by: list[str]
    retry_after: float


def defer(task: Task, decision: Decision, names: list[str]) -> Any:
    """Send the task again at ``retry_after`` and end this run as a retry.

    Not ``task.retry``: it counts toward ``max_retries`` (its ``max_retries=None`` means the
    task's own), and a cap's deferral is no failure. The same request is sent again, with
    its ``retries`` unchanged.
    """
    request = task.request
    if request.is_eager or request.called_directly:  # eager: a re-sent task runs at once
        _log.info(
            "task %s[%s] deferred %.3fs (run here, not by a worker: not sent)",
            task.name,
            request.id,
            decision.retry_after,
        )
        return Deferred(
            deferred=True,
            policy=decision.policy,
            denied_by=names,
            retry_after=decision.retry_after,
        )
    countdown = decision.retry_after
    said = f"deferred {countdown:.3f}s by policy {decision.policy!r}: denied by {', '.join(names)}"
    if _expired_by(task, countdown):
        _log.info("task %s[%s] revoked: %s, past its expiry", task.name, request.id, said)
        stored = _stores_errors(task, request)
        task.backend.mark_as_revoked(request.id, "expired", request=request, store_result=stored)
        task_revoked.send(sender=task, request=request, terminated=False, signum=None, expired=True)
        raise Ignore(f"expired: {said}")  # the state is REVOKED, as a worker leaves it
    again = task.signature_from_request(request, countdown=countdown, retries=request.retries)
    again.apply_async()
    _log.info("task %s[%s] %s", task.name, request.id, said)
    raise Retry(said, when=countdown, sig=again)  # the worker's log: "Task ...[id] retry: ..."


def _stores_errors(task: Task, request: Any) -> bool:
    """Whether the worker would store this run's revocation (its ``store_errors``): the
    call's ``ignore_result`` (``apply_async(ignore_result=False)``) over the task's."""
    ignored = vars(request).get("ignore_result")  # set by the message, else the task's
    if ignored is None:
        ignored = task.ignore_result
    return bool(task.store_errors_even_if_ignored or not ignored)


def _expired_by(task: Task, countdown: float) -> bool:
    """Whether the task's ``expires`` passes before its turn: the copy would wait in a
    worker, unacknowledged (past RabbitMQ's ``consumer_timeout``, for a long deferral), for a
    worker to revoke it then. A naive ``expires`` is UTC, as the worker reads it."""
    given = maybe_iso8601(task.request.expires)
    if given is None:
        return False
    expires: datetime = maybe_make_aware(given)
    return datetime.now(expires.tzinfo) + timedelta(seconds=countdown) > expires
