"""What ``capped_task`` is given, checked at decoration: Celery's options (a misspelt one
refused, Celery's per-worker ``rate_limit`` too, and ``on_denied="raise"``'s kept from
Celery's retries) and the function's parameters (each of the policy's dimensions and reads
taken as a keyword)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery

from freqguard.errors import CapExceeded, ConfigError, shown
from freqguard.policy import Policy

__all__ = ["check_options", "check_signature", "raise_options"]


#: What ``app.task`` takes beside a Task's own attributes (Celery 5).
_DECORATOR_OPTIONS = [
    "base",
    "autoretry_for",
    "dont_autoretry_for",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "retry_kwargs",
    "queue",
    "shared",
    "lazy",
    "filter",
    "pydantic",
    "pydantic_strict",
    "pydantic_context",
    "pydantic_dump_kwargs",
    "routing_key",
    "exchange",
]


#: ``@capped``'s options, which ``capped_task`` would pass to Celery as attributes nobody
#: reads, and what a task does instead.
_CAPPED_ONLY = {
    "cost": "each run counts 1 (a task that costs more is a policy of its own, its rates "
    "divided by that cost)",
    "key": "the hit's context is the task's keyword arguments named as the policy's dimensions",
    "on_exceeded": "a denied run is retried when the policy admits it (its retry_after)",
}


def check_options(app: Celery, options: Mapping[str, Any]) -> None:
    """Refuse an option that is a misspelling of Celery's (``max_retires``): ``app.task``
    would set it as an attribute nobody reads. An option near none is the user's own.
    Refuse Celery's ``rate_limit`` too: a second count, per worker, of the runs the policy
    decides (a deferred run taking a token of it again), whether given here or by the base
    class the task is made of (``base=``, the app's ``Task``)."""
    base = options.get("base") or app.Task
    rate = options["rate_limit"] if "rate_limit" in options else getattr(base, "rate_limit", None)
    if rate is not None:
        given = "" if "rate_limit" in options else f", from the base class {base.__name__}"
        raise ConfigError(
            f"capped_task takes no rate_limit= (got {shown(rate)}{given}): Celery's rate_limit "
            f"is per worker (each worker its own rate, and a deferred run takes a token of it "
            f"again); one rate for every worker is a rule of the policy, Rule({shown(rate)}, "
            "name=...) (docs/celery.md, Celery's rate_limit)"
        )
    known = [*(name for name in dir(app.Task) if not name.startswith("_")), *_DECORATOR_OPTIONS]
    for name in options:
        if name in _CAPPED_ONLY:  # @capped's, which a Celery task would keep unread
            raise ConfigError(f"capped_task takes no {name}=: {_CAPPED_ONLY[name]}")
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if name not in known and close:
            raise ConfigError(
                f"capped_task option {shown(name)} is not Celery's: did you mean {close[0]}? "
                "(app.task would keep it as an attribute no worker reads)"
            )


def raise_options(app: Celery, options: dict[str, Any], denied: type[Exception]) -> None:
    """For ``on_denied="raise"``: ``denied`` (``TaskDenied``) in the task's ``throws`` (the
    worker logs it at INFO, without a traceback) and, under ``autoretry_for``, in its
    ``dont_autoretry_for`` (a denial fails the task, as documented, rather than be retried
    on Celery's back-off, spending ``max_retries``); ``autoretry_for`` naming the denial
    itself is refused: that is ``on_denied="defer"``."""
    base = options.get("base") or app.Task
    retried = _classes(options.get("autoretry_for", getattr(base, "autoretry_for", ())))
    own = [c for c in retried if isinstance(c, type) and issubclass(c, CapExceeded)]
    if own:
        raise ConfigError(
            f'capped_task(on_denied="raise") with autoretry_for=({own[0].__name__},): Celery '
            "would retry a denied task on its back-off, each retry toward max_retries; "
            'on_denied="defer" sends it again at retry_after and spends none'
        )
    thrown = options.get("throws", getattr(base, "throws", ()))  # the base's, kept
    options["throws"] = (*_classes(thrown), denied)
    if retried:
        kept = options.get("dont_autoretry_for", getattr(base, "dont_autoretry_for", ()))
        options["dont_autoretry_for"] = (*_classes(kept), denied)


def _classes(given: Any) -> tuple[Any, ...]:
    """An option Celery takes as one class or several."""
    return (given,) if isinstance(given, type) else tuple(given or ())


def check_signature(fn: Callable[..., Any], signature: inspect.Signature, policy: Policy) -> None:
    params = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    takes = {p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    missing = [d for d in policy.dimensions if d not in takes]
    if missing:
        raise ConfigError(
            f"task {fn.__qualname__!r} takes no keyword argument for the dimension(s) "
            f"{', '.join(missing)} of policy {policy.name!r}: the hit's context comes from them"
        )
    unread = [name for name in policy.reads if name not in takes]
    if unread:  # a tier or a zone the task could never be sent
        raise ConfigError(
            f"task {fn.__qualname__!r} takes no keyword argument for {', '.join(unread)}, "
            f"which policy {policy.name!r}'s rules read (a tier, a zone, a priority): add "
            "the parameter (with a default), or a policy that does not read it"
        )
