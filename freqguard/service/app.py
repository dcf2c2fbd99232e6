"""The decision service's Starlette app: a configuration's policies behind HTTP/JSON, its
routes made from the operations :mod:`freqguard.service.openapi` declares.

A denial is a 200 with ``"allowed": false``. Anything else is RFC 9457 problem+json: a bad
body a 422 naming the field, an unknown policy, rule or path a 404, a body over the limit a
413, the store failing a 503; a call refused by :mod:`~freqguard.service.gate` a 401, 403
or 415.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

import freqguard.service.schema as schema
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard
from freqguard.observe.base import RepeatFilter
from freqguard.policy import Policy
from freqguard.rates import written
from freqguard.script.keys import context_digest
from freqguard.service.access import notes
from freqguard.service.bodies import MAX_BATCH, MAX_BODY, ManyCall, member, read
from freqguard.service.dispatch import Calls, Handler
from freqguard.service.gate import Gate, HostCheck
from freqguard.service.history import TOP_MINUTES, history_for
from freqguard.service.openapi import BASE, CALLS, READS, document
from freqguard.service.page import PAGE
from freqguard.service.problems import (
    HANDLERS,
    Problem,
    from_store,
    invalid,
    shown,
    store_failed,
    unforeseen,
)
from freqguard.service.ready import Readiness

__all__ = ["MAX_BATCH", "MAX_BODY", "create_app"]


class JSON(Response):
    """A 200 of ``application/json``, encoded by msgspec, its head made at once (nothing of
    Starlette's own ``__init__`` serves it)."""

    media_type = "application/json"

    def __init__(self, content: Any) -> None:
        self.status_code, self.background = 200, None
        self.body = body = schema.encode(content)
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


@dataclass(frozen=True)
class Names:
    """The names one policy's contexts may hold (a Policy derives them at each ask): its
    dimensions, as a set, and with what its rules read."""

    policy: Policy
    dimensions: tuple[str, ...]
    keyed: frozenset[str]
    hit: frozenset[str]

    @classmethod
    def of(cls, policy: Policy) -> Names:
        dimensions = tuple(policy.dimensions)
        return cls(
            policy, dimensions, frozenset(dimensions), frozenset((*dimensions, *policy.reads))
        )

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


@dataclass(frozen=True)
class Call:
    """One call, past the gate and its body's checks."""

    policy: str
    names: Names
    body: Any
    rule: str | None


Work = Callable[[Call], Awaitable[Any]]
#: The page runs its own inline script and style, and talks to this origin only.
_CSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


class Service:
    """The app's state and its handlers, each the method named after its operation's id in
    snake case (``hitMany``: :meth:`hit_many`)."""

    def __init__(
        self, guard: AsyncGuard, tokens: Sequence[str], metrics: Any, keep_history: bool
    ) -> None:
        self.guard, self.registry, self.gate = guard, metrics, Gate(tokens)
        self.ready, self.history = Readiness(guard), history_for(guard, keep_history)
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
            found = self._names[name] = Names.of(policy)
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
                answer = await work(Call(policy, names, body, rule))
                note = notes(request.scope)
                if note is not None:  # an access log is kept
                    _note(note, policy, body, answer)
                return JSON(answer)
            except Problem:
                raise
            except BackendUnavailable as exc:
                raise store_failed(exc, policy, self.logged) from None
            except ConfigError as exc:
                if from_store(exc):  # the store answered (MOVED): it applied nothing
                    failed = BackendUnavailable(str(exc), answered=True, sent=False)
                    raise store_failed(failed, policy, self.logged) from None
                field = exc.argument or kind.__struct_fields__[0]
                raise invalid(field, str(exc)) from None
            except Exception as exc:
                raise unforeseen(exc, request) from None

        return handle

    async def hit(self, call: Call) -> Any:
        context = call.body.context
        decided = await self.guard.hit(call.policy, call.body.cost, **context)
        await self.history.record(call.policy, (decided,), (context,), call.names.dimensions)
        return schema.decision(decided)

    async def hit_many(self, call: Call) -> Any:
        contexts = call.body.contexts
        decisions = await self.guard.hit_many(call.policy, contexts, call.body.cost)
        await self.history.record(call.policy, decisions, contexts, call.names.dimensions)
        return schema.Decisions([schema.decision(d) for d in decisions])

    async def peek(self, call: Call) -> Any:
        return schema.decision(await self.guard.peek(call.policy, **call.body.context))

    async def refund(self, call: Call) -> Any:
        body = call.body
        return schema.decision(await self.guard.refund(call.policy, body.cost, **body.context))

    async def reset(self, call: Call) -> Any:
        done = await self.guard.reset(call.policy, rules=call.body.rules, **call.body.context)
        return schema.ResetDone(reset=True, rules=list(done))

    async def denials(self, call: Call) -> Any:
        context, dimensions = call.body.context, call.names.dimensions
        missing = [d for d in dimensions if d not in context]
        if missing:  # no guard call here to say it: a digest of a part of the key is no key
            taken = f"missing: policy {call.policy!r} takes: {', '.join(dimensions)}"
            raise invalid(member("context", missing[0]), taken)
        key = context_digest(context, dimensions)
        async with _store_answers("the context's denials"):
            denied = await self.history.denied(call.policy, key, call.body.minutes)
        return schema.Denials(key=key, denied=denied, minutes=call.body.minutes)

    async def limits(self, call: Call) -> Any:
        found = await self.guard.limits_for(call.policy, **call.body.context)
        # each rate as written (50/day), as the page lists the policy's: it parses back
        return schema.Limits(
            {r: None if rate is None else written(rate) for r, rate in found.items()}
        )

    async def set_limit(self, call: Call) -> Any:
        body = call.body
        await self.guard.set_limit(
            call.policy, str(call.rule), body.rate, ttl=body.ttl, **body.context
        )
        return await self.limits(call)

    async def clear_limit(self, call: Call) -> Any:
        await self.guard.clear_limit(call.policy, str(call.rule), **call.body.context)
        return await self.limits(call)

    async def healthz(self, request: Request) -> Response:
        return JSON(schema.Health(status="ok", policies=sorted(self.guard.policies)))

    async def readyz(self, request: Request) -> Response:
        return JSON(await self.ready.check())

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
    a decision's outcome."""
    note["policy"] = policy
    if isinstance(body, ManyCall):
        note["contexts"] = len(body.contexts)
    else:
        note["context"] = body.context
    if isinstance(answer, schema.Decision):
        note["allowed"] = answer.allowed


def _method(operation: str) -> str:
    """The name of the handler of an operation: its id in snake case."""
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
