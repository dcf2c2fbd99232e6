"""The decision service's Starlette app: a configuration's policies behind HTTP/JSON, its
routes made from the operations :mod:`freqguard.service.openapi` declares (with the
problems each may answer). A denial is a 200 with ``"allowed": false``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

import freqguard.service.schema as schema
from freqguard.engine.limits import limit_written
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard
from freqguard.observe.base import RepeatFilter
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.script.keys import context_digest
from freqguard.service.access import notes
from freqguard.service.bodies import MAX_BATCH, MAX_BODY, ManyCall, member, read
from freqguard.service.dispatch import Calls, Handler
from freqguard.service.gate import Gate, HostCheck
from freqguard.service.history import TOP_MINUTES, History
from freqguard.service.openapi import BASE, CALLS, READS, document
from freqguard.service.problems import (
    HANDLERS,
    RESTING,
    Problem,
    from_store,
    invalid,
    log,
    shown,
    store_failed,
    unforeseen,
)

__all__ = ["MAX_BATCH", "MAX_BODY", "create_app"]


class JSON(Response):
    """A 200 of ``application/json``, encoded by msgspec, its head made at once (nothing of
    Starlette's own ``__init__`` serves it)."""

    def __init__(self, content: Any) -> None:
        self.status_code, self.background = 200, None
        self.body = body = schema.encode(content)
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


class Names:
    """The names one policy's contexts may hold (a Policy derives them at each ask): its
    dimensions, as a set, and with what its rules read."""

    def __init__(self, policy: Policy) -> None:
        self.policy, self.dimensions = policy, policy.dimensions
        self.keyed = frozenset(self.dimensions)
        self.hit = frozenset((*self.dimensions, *policy.reads))
        self.shadows = frozenset(rule.id for rule in policy.rules if rule.shadow)

    def check(self, body: Any, limits: bool) -> None:
        """Refuse a name the policy does not take (a limit's context: a dimension) before the
        context is passed as keywords, where ``cost`` would be another argument."""
        accepted = self.keyed if limits else self.hit
        if isinstance(body, ManyCall):
            for index, context in enumerate(body.contexts):
                if not context.keys() <= accepted:
                    self._refuse(context, f"contexts[{index}]", accepted)
        elif not body.context.keys() <= accepted:
            self._refuse(body.context, "context", accepted)

    def _refuse(self, context: Mapping[str, Any], path: str, accepted: frozenset[str]) -> None:
        name = next(name for name in context if name not in accepted)
        takes = f"policy {self.policy.name!r} takes: {', '.join(self.dimensions) or 'none'}"
        if self.policy.reads and accepted is self.hit:
            takes += f"; and may read: {', '.join(self.policy.reads)}"
        raise invalid(member(path, name), f"not a name {takes}")


#: A call's work: its policy, that policy's names, its body past their checks, its rule.
Work = Callable[[str, Names, Any, str | None], Awaitable[Any]]
#: The operator's page: one HTML document, its style and script inline (no asset, no CDN),
#: that calls the API as any client does (JSON, this origin, the token typed into it).
PAGE = resources.files("freqguard.service").joinpath("page.html").read_text(encoding="utf-8")
#: The page runs its own inline script and style, and talks to this origin only.
_CSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"
#: ``/readyz``'s policy (no count of it is ever kept: a peek only reads).
PROBE = "freqguard-ready"
READY_TIMEOUT = 2.0  # seconds the store has to answer the probe


class Service:
    """The app's state and its handlers, each the method named after its operation's id in
    snake case (``hitMany``: :meth:`hit_many`)."""

    def __init__(
        self, guard: AsyncGuard, tokens: Sequence[str], metrics: Any, keep_history: bool
    ) -> None:
        self.guard, self.registry, self.gate = guard, metrics, Gate(tokens)
        probe = Policy(PROBE, Rule("1/second", name="probe"))
        # as freqguard ping: it writes nothing, loads the store's function where it is
        # missing, and has no breaker, so a store that came back is seen at once
        self.probe = AsyncGuard(guard.backend, [probe], prefix=guard.prefix, breaker=None)
        self.history = History(guard, kept=keep_history)
        self.logged = RepeatFilter(60.0)  # store failures: once a minute, not once a request
        self.document = document()
        self._names: dict[str, Names] = {}

    def policy(self, name: str) -> Policy:
        """The policy of that name, or a 404 listing those served."""
        policy = self.guard.policies.get(name)
        if policy is None:
            known = ", ".join(sorted(self.guard.policies))
            raise Problem(404, f"no policy {shown(name, 60)} (policies: {known})")
        return policy

    def names(self, request: Request) -> tuple[str, Names]:
        """The policy the path names, and its names (said again if it was replaced)."""
        name = str(request.path_params["policy"])
        policy = self.policy(name)
        found = self._names.get(name)
        if found is None or found.policy is not policy:
            found = self._names[name] = Names(policy)
        return name, found

    def endpoint(
        self, works: Mapping[str, tuple[type[msgspec.Struct], Work]], limits: bool
    ) -> Handler:
        """A call's handler: the gate, the policy (and rule), the body and its context's
        names (``limits``: a limit's), then ``works``' by the method; a field the guard
        refuses is the one its error names, else the body's first."""

        async def handle(request: Request) -> Response:
            policy, kind = "?", msgspec.Struct
            try:
                self.gate.check(request)
                policy, names = self.names(request)
                rule = request.path_params.get("rule")
                if rule is not None and rule not in {r.id for r in names.policy.rules}:
                    raise Problem(404, f"policy {policy!r} has no rule {shown(rule, 60)}")
                kind, work = works[request.method]
                body = await read(request, kind)
                names.check(body, limits)
                answer = await work(policy, names, body, rule)
                note = notes(request.scope)
                if note is not None:  # an access log is kept
                    _note(note, policy, body, answer)
                return JSON(answer)
            except Exception as exc:
                problem = self._problem(exc, policy, kind, request)
                note = notes(request.scope) if policy in self.guard.policies else None
                if note is not None:  # the access log's: the policy, the field at fault
                    note["policy"], note["field"] = policy, problem.field
                raise problem from None

        return handle

    def _problem(
        self, exc: Exception, policy: str, kind: type[msgspec.Struct], request: Request
    ) -> Problem:
        """A call's answer to ``exc``: a refusal as it is, the store's failure (a node's MOVED
        too: nothing applied), a field the guard refuses (the one its error names, else the
        body's first), or an exception nobody foresaw."""
        if isinstance(exc, Problem):
            return exc
        if isinstance(exc, ConfigError) and from_store(exc):
            exc = BackendUnavailable(str(exc), answered=True, sent=False)
        if isinstance(exc, BackendUnavailable):
            return store_failed(exc, policy, self.logged)
        if isinstance(exc, ConfigError):
            return invalid(exc.argument or kind.__struct_fields__[0], str(exc))
        return unforeseen(exc, request)

    async def hit(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        _no_leases(names.policy)
        decided = await self.guard.hit(policy, body.cost, **body.context)
        await self.history.record(policy, (decided,), (body.context,), names.dimensions)
        return schema.decision(decided, names.shadows)

    async def hit_many(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        _no_leases(names.policy)
        decisions = await self.guard.hit_many(policy, body.contexts, body.cost)
        await self.history.record(policy, decisions, body.contexts, names.dimensions)
        return schema.Decisions([schema.decision(d, names.shadows) for d in decisions])

    async def peek(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        return schema.decision(await self.guard.peek(policy, **body.context), names.shadows)

    async def refund(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        _no_leases(names.policy)
        refunded = await self.guard.refund(policy, body.cost, **body.context)
        return schema.decision(refunded, names.shadows)

    async def reset(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        done = await self.guard.reset(policy, rules=body.rules, **body.context)
        return schema.ResetDone(reset=True, rules=list(done))

    async def denials(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        context, dimensions = body.context, names.dimensions
        missing = [d for d in dimensions if d not in context]
        if missing:  # no guard call here to say it: a digest of a part of the key is no key
            taken = f"missing: policy {policy!r} takes: {', '.join(dimensions)}"
            raise invalid(member("context", missing[0]), taken)
        key = context_digest(context, dimensions)
        async with _store_answers("the context's denials"):
            denied = await self.history.denied(policy, key, body.minutes)
        return schema.Denials(key=key, denied=denied, minutes=body.minutes)

    async def limits(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        found = await self.guard.limits_for(policy, **body.context)
        # each rate as written (50/day, 5 concurrent), as the page lists the policy's: a
        # rate shown can be set back as it is
        rules = {rule.id: rule for rule in self.guard.policies[policy].rules}
        return schema.Limits(
            {
                r: None if rate is None else limit_written(rules[r], rate)
                for r, rate in found.items()
            }
        )

    async def set_limit(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        await self.guard.set_limit(policy, str(rule), body.rate, ttl=body.ttl, **body.context)
        return await self.limits(policy, names, body, rule)

    async def clear_limit(self, policy: str, names: Names, body: Any, rule: str | None) -> Any:
        await self.guard.clear_limit(policy, str(rule), **body.context)
        return await self.limits(policy, names, body, rule)

    async def healthz(self, request: Request) -> Response:
        return JSON(schema.Health(status="ok", policies=sorted(self.guard.policies)))

    async def readyz(self, request: Request) -> Response:
        """Ready if the store answered :data:`PROBE`'s peek in time and the guard's breaker
        lets calls go to it; else a 503 saying whether it failed (what it said goes to the
        log, as for any call), was too slow, or is held off (the circuit's wait)."""
        breaker, wait = self.guard.breaker, 1
        try:
            await asyncio.wait_for(self.probe.peek(PROBE), READY_TIMEOUT)
        except asyncio.TimeoutError:
            detail = f"the store did not answer in time (within {READY_TIMEOUT:g} s)"
        except (BackendUnavailable, ConfigError) as exc:  # ConfigError: a node's MOVED
            log.warning("freqguard serve: /readyz: %s", exc)
            late = isinstance(exc, BackendUnavailable) and exc.sent and not exc.answered
            detail = (
                "the store did not answer in time (the client's own timeout)"
                if late
                else "the store could not be reached or refused the probe"
            )
        else:
            held = None if breaker is None else breaker.holding_off()
            if held is None:
                store = type(self.guard.backend).__name__
                return JSON(schema.Ready(status="ready", store=store))
            wait = max(1, math.ceil(held))
            detail = f"{RESTING}: decisions are not the store's until its probe in {held:.1f} s"
        raise Problem(503, f"not ready: {detail}", headers={"retry-after": str(wait)})

    async def metrics(self, request: Request) -> Response:
        if self.registry is None:
            raise Problem(404, "no metrics: the prometheus extra is not installed")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        return JSON(self.document)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE, headers={"content-security-policy": _CSP})

    async def policies(self, request: Request) -> Response:
        return JSON(
            schema.PolicyList([schema.policy_info(p) for p in self.guard.policies.values()])
        )

    async def stats(self, request: Request) -> Response:
        return JSON(schema.Stats(schema.stat_rows(self.registry)))

    def _asked(self, request: Request) -> list[str]:
        name = request.query_params.get("policy")
        return sorted(self.guard.policies) if name is None else [self.policy(name).name]

    async def stats_top(self, request: Request) -> Response:
        names, text = self._asked(request), request.query_params.get("minutes", "5")
        # ASCII digits, and few: int() reads other digits too, and refuses past 4,300
        if not (text.isascii() and text.isdigit() and len(text) <= 3) or not (
            1 <= int(text) <= TOP_MINUTES
        ):
            raise invalid("minutes", f"an integer from 1 to {TOP_MINUTES}, got {shown(text, 20)}")
        digest = None if self.gate.authorized(request) else self.gate.digest
        async with _store_answers("the top keys"):
            return JSON(await self.history.top(names, int(text), digest))

    async def stats_history(self, request: Request) -> Response:
        policies = {n: [r.id for r in self.guard.policies[n].rules] for n in self._asked(request)}
        async with _store_answers("the decisions' history"):
            return JSON(await self.history.read(policies))


def _no_leases(policy: Policy) -> None:
    """A policy that counts calls in flight is hit where the call is made, which holds its
    lease until the call ends: the service never sees that end."""
    if policy.leases:
        rule = next(r.id for r in policy.rules if r.lease)
        raise Problem(
            422,
            f"policy {policy.name!r} counts calls in flight (its concurrency "
            f"rule {rule!r}): a lease is held by the process making the call until "
            "it ends, which this service never sees; take it there, with freqguard's "
            "lease block (peek, reset and limits serve the policy here)",
            field="policy",
        )


@contextlib.asynccontextmanager
async def _store_answers(what: str) -> AsyncIterator[None]:
    """A read of the history: a redis-py error is a 503 (the store did not answer); a
    Problem (the history is off) stays as it is."""
    try:
        yield
    except Problem:
        raise
    except Exception as exc:
        raise Problem(503, f"the store did not answer for {what}") from exc


def _note(note: dict[str, Any], policy: str, body: Any, answer: Any) -> None:
    """What the access log tells of a call: its policy, its context or a batch's size, and
    a decision's outcome (and the rules that denied)."""
    note["policy"] = policy
    if isinstance(body, ManyCall):
        note["contexts"] = len(body.contexts)
    else:
        note["context"] = body.context
    if isinstance(answer, schema.Decision):
        note["allowed"], note["denied_by"] = answer.allowed, answer.denied_by


def _method(operation: str) -> str:
    return re.sub(r"[A-Z]", lambda upper: "_" + upper[0].lower(), operation)


def create_app(
    guard: AsyncGuard,
    tokens: Sequence[str] = (),
    metrics: Any = None,
    hosts: Sequence[str] | None = None,
    keep_history: bool = True,
) -> Any:
    """The service's app on ``guard``, requiring one of ``tokens`` if any; ``metrics``: a
    ``prometheus_client`` registry for ``/metrics``; ``hosts``: the only names it answers to
    in ``Host`` (None: any); ``keep_history``: False keeps none (its reads answer 404).

    Raises:
        ConfigError: a token that is not one word of visible ASCII without commas.
    """
    service = Service(guard, tokens, metrics, keep_history)
    for policy in guard.policies.values():
        if policy.leases:  # served for its reads: said once, as the app is made
            log.warning(
                "freqguard serve: policy %r counts calls in flight (a concurrency rule): "
                "hit, hit-many and refund refuse it (a lease is held where the call is "
                "made); peek, reset and limits serve it",
                policy.name,
            )
    calls: dict[str, dict[str, tuple[type[msgspec.Struct], Work]]] = {}
    for call in CALLS:
        work = getattr(service, _method(call.id))
        calls.setdefault(call.path, {})[call.method] = (call.body, work)
    routes = [
        Route(f"{BASE}/{path}", service.endpoint(by, path.startswith("limits")), methods=list(by))
        for path, by in calls.items()
    ]
    routes += [Route(read.path, getattr(service, _method(read.id))) for read in READS]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await service.history.aclose()
        await guard.aclose()

    starlette = Starlette(routes=routes, exception_handlers=HANDLERS, lifespan=lifespan)
    app = Calls(starlette, routes)
    return app if hosts is None else HostCheck(app, hosts)
