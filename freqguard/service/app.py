"""The decision service's Starlette app: a configuration's policies behind HTTP/JSON.

    POST /v1/policies/{policy}/hit        {"context": {...}, "cost": 1}  -> a decision
    POST /v1/policies/{policy}/hit-many   {"contexts": [...], "cost": 1} -> {"decisions": [...]}
    POST /v1/policies/{policy}/peek       {"context": {...}}             -> a decision
    POST /v1/policies/{policy}/refund     {"context": {...}, "cost": 1}  -> a decision
    POST /v1/policies/{policy}/reset      {"context": {...}, "rules": [...]}
                                          -> {"reset": true, "rules": [the rules reset]}
    POST /v1/policies/{policy}/limits     {"context": {...}}             -> {"limits": {...}}
    PUT  /v1/policies/{policy}/limits/{rule}  {"context", "rate", "ttl"} -> {"limits": {...}}
    DELETE /v1/policies/{policy}/limits/{rule} {"context": {...}}        -> {"limits": {...}}
    POST /v1/policies/{policy}/denials    {"context": {...}, "minutes": 5}
                                          -> {"key": its digest, "denied": n, "minutes": 5}
    GET  /healthz (up), /readyz (the store answers), /metrics, /openapi.json
    GET  /  (the operator's page), /v1/policies, /v1/stats, /v1/stats/history,
         /v1/stats/top (what the page reads; open: top keys digested without a token)

A denial is a 200 with ``"allowed": false`` (the call succeeded). Anything else is RFC 9457
problem+json (:mod:`freqguard.service.problems`): a bad body a 422 naming the field, an
unknown policy, rule or path a 404, a body over the size limit a 413, the store failing a
503. Every call under ``/v1/policies`` takes ``application/json`` only (else 415), from
the service's own origin (a browser's call from another site: 403), and with tokens
configured ``Authorization: Bearer <token>`` (else 401; :mod:`freqguard.service.gate`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

import freqguard.service.schema as schema
from freqguard.decision import Decision
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard
from freqguard.policy import Policy
from freqguard.rates import written
from freqguard.script.keys import context_digest
from freqguard.service.access import notes
from freqguard.service.bodies import (
    MAX_BATCH,
    MAX_BODY,
    ManyCall,
    member,
    read,
)
from freqguard.service.dispatch import Calls
from freqguard.service.gate import Gate, HostCheck
from freqguard.service.history import TOP_MINUTES, history_for
from freqguard.service.listing import policy_info, stat_rows
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

__all__ = ["MAX_BATCH", "MAX_BODY", "create_app", "decision_json"]

Handler = Callable[[Request], Awaitable[Response]]


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as the service answers it, as plain JSON values."""
    built: dict[str, Any] = msgspec.to_builtins(schema.decision(decision))
    return built


class JSON(Response):
    """A 200 of ``application/json``, encoded by msgspec (a struct of
    :mod:`freqguard.service.schema`, or plain values), its head made at once: nothing of
    Starlette's own ``__init__`` (a charset, a background) serves it."""

    media_type = "application/json"

    def __init__(self, content: Any) -> None:
        self.status_code, self.background = 200, None
        self.body = body = schema.encode(content)
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


_JSON_TYPE = (b"content-type", b"application/json")


@dataclass(frozen=True)
class Names:
    """The names one policy's contexts may hold, said once (a Policy derives them from its
    rules at each ask): its dimensions, and those and what its rules read."""

    policy: Policy
    dimensions: tuple[str, ...]
    hit: frozenset[str]

    @classmethod
    def of(cls, policy: Policy) -> Names:
        dimensions = tuple(policy.dimensions)
        return cls(policy, dimensions, frozenset((*dimensions, *policy.reads)))

    def check(self, context: Mapping[str, Any], path: str, *, limits: bool = False) -> None:
        """Refuse a name the policy does not take (a limit's context: a dimension), before
        the context is passed to the guard as keywords, where a name like ``cost`` would be
        another argument; what else the policy refuses the guard names itself."""
        accepted = frozenset(self.dimensions) if limits else self.hit
        if context.keys() <= accepted:
            return
        name = next(name for name in context if name not in accepted)
        takes = f"policy {self.policy.name!r} takes: {', '.join(self.dimensions) or 'none'}"
        if self.policy.reads and not limits:
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


class Service:
    """The app's state: the guard, the gate, the names each policy takes."""

    def __init__(self, guard: AsyncGuard, tokens: Sequence[str], metrics: Any) -> None:
        self.guard, self.metrics, self.gate = guard, metrics, Gate(tokens)
        self._names: dict[str, Names] = {}

    def names(self, request: Request) -> tuple[str, Names]:
        """The policy the path names, and its names (said again if it was replaced)."""
        name = str(request.path_params["policy"])
        policy = self.guard.policies.get(name)
        if policy is None:
            known = ", ".join(sorted(self.guard.policies))
            raise Problem(404, f"no policy {shown(name, 60)} (policies: {known})")
        found = self._names.get(name)
        if found is None or found.policy is not policy:
            found = self._names[name] = Names.of(policy)
        return name, found

    def endpoint(self, works: Mapping[str, tuple[type[msgspec.Struct], Work]]) -> Handler:
        """A call's handler: the gate, the policy (and rule), the body, then ``works``' by
        the request's method; what the guard refuses is the field its error names (else
        the body's first: ``context``, or a batch's ``contexts``)."""

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
                answer = await work(Call(policy, names, body, rule))
                note = notes(request.scope)
                if note is not None:  # an access log is kept
                    _note(note, policy, body, answer)
                return JSON(answer)
            except Problem:
                raise
            except BackendUnavailable as exc:
                raise store_failed(exc, policy) from None
            except ConfigError as exc:
                if from_store(exc):  # the store answered (MOVED): it applied nothing
                    failed = BackendUnavailable(str(exc), answered=True, sent=False)
                    raise store_failed(failed, policy) from None
                field = exc.argument or kind.__struct_fields__[0]
                raise invalid(field, str(exc)) from None
            except Exception as exc:
                raise unforeseen(exc, request) from None

        return handle


def _note(note: dict[str, Any], policy: str, body: Any, answer: Any) -> None:
    """What the access log tells of a call: its policy, its context (digested there) or
    how many a batch held, and a decision's outcome."""
    note["policy"] = policy
    if isinstance(body, ManyCall):
        note["contexts"] = len(body.contexts)
    else:
        note["context"] = body.context
    if isinstance(answer, schema.Decision):
        note["allowed"] = answer.allowed


#: The page runs its own inline script and style, and talks to this origin only.
_CSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


def create_app(
    guard: AsyncGuard,
    tokens: Sequence[str] = (),
    metrics: Any = None,
    hosts: Sequence[str] | None = None,
    keep_history: bool = True,
) -> Any:
    """The service's app on ``guard`` (its policies), requiring one of ``tokens`` if any;
    ``metrics``: a ``prometheus_client`` registry ``/metrics`` exposes, if given; ``hosts``:
    the only names it answers to in ``Host`` (None: any; ``gate.served_names``);
    ``keep_history``: False keeps no decisions' history (its two reads answer 404).

    Raises:
        ConfigError: a token that is not one word of visible ASCII without commas.
    """
    service = Service(guard, tokens, metrics)
    ready, the_document, history = Readiness(guard), document(), history_for(guard, keep_history)

    async def hit(call: Call) -> Any:
        context = call.body.context
        call.names.check(context, "context")
        decided = await guard.hit(call.policy, call.body.cost, **context)
        await history.record(call.policy, (decided,), (context,), call.names.dimensions)
        return schema.decision(decided)

    async def hit_many(call: Call) -> Any:
        contexts = call.body.contexts
        for index, context in enumerate(contexts):
            call.names.check(context, f"contexts[{index}]")
        decisions = await guard.hit_many(call.policy, contexts, call.body.cost)
        await history.record(call.policy, decisions, contexts, call.names.dimensions)
        return schema.Decisions([schema.decision(d) for d in decisions])

    async def peek(call: Call) -> Any:
        call.names.check(call.body.context, "context")
        return schema.decision(await guard.peek(call.policy, **call.body.context))

    async def refund(call: Call) -> Any:
        context = call.body.context
        call.names.check(context, "context")
        return schema.decision(await guard.refund(call.policy, call.body.cost, **context))

    async def reset(call: Call) -> Any:
        context, rules = call.body.context, call.body.rules
        call.names.check(context, "context")
        done = await guard.reset(call.policy, rules=rules, **context)
        return schema.ResetDone(reset=True, rules=list(done))

    async def denials(call: Call) -> Any:
        context, minutes = call.body.context, call.body.minutes
        call.names.check(context, "context")
        missing = [d for d in call.names.dimensions if d not in context]
        if missing:  # no guard call here to say it: a digest of a part of the key is no key
            taken = ", ".join(call.names.dimensions)
            raise invalid(
                member("context", missing[0]), f"missing: policy {call.policy!r} takes: {taken}"
            )
        key = context_digest(context, call.names.dimensions)
        denied = await history.denied(call.policy, key, minutes)
        return schema.Denials(key=key, denied=denied, minutes=minutes)

    async def limits(call: Call) -> Any:
        call.names.check(call.body.context, "context", limits=True)
        return await _limits(call.policy, call.body.context)

    async def set_limit(call: Call) -> Any:
        body, rule = call.body, str(call.rule)
        call.names.check(body.context, "context", limits=True)
        await guard.set_limit(call.policy, rule, body.rate, ttl=body.ttl, **body.context)
        return await _limits(call.policy, body.context)

    async def clear_limit(call: Call) -> Any:
        context = call.body.context
        call.names.check(context, "context", limits=True)
        await guard.clear_limit(call.policy, str(call.rule), **context)
        return await _limits(call.policy, context)

    async def _limits(policy: str, context: Mapping[str, Any]) -> Any:
        found = await guard.limits_for(policy, **context)
        # each rate as written (50/day), as the page lists the policy's: it parses back
        return schema.Limits(
            {r: None if rate is None else written(rate) for r, rate in found.items()}
        )

    async def healthz(request: Request) -> Response:
        return JSON(schema.Health(status="ok", policies=sorted(guard.policies)))

    async def readyz(request: Request) -> Response:
        return JSON(await ready.check())

    async def metrics_page(request: Request) -> Response:
        if service.metrics is None:
            raise Problem(404, "no metrics: the prometheus extra is not installed")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(service.metrics), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        return JSON(the_document)

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE, headers={"content-security-policy": _CSP})

    async def listed(request: Request) -> Response:
        return JSON(schema.PolicyList([policy_info(p) for p in guard.policies.values()]))

    async def stats(request: Request) -> Response:
        return JSON(schema.Stats(stat_rows(service.metrics)))

    def asked(request: Request) -> list[str]:
        name = request.query_params.get("policy")
        if name is not None and name not in guard.policies:
            known = ", ".join(sorted(guard.policies))
            raise Problem(404, f"no policy {shown(name, 60)} (policies: {known})")
        return sorted(guard.policies) if name is None else [name]

    async def stats_top(request: Request) -> Response:
        names, text = asked(request), request.query_params.get("minutes", "5")
        # ASCII digits, and few: int() reads other digits too, and refuses past 4,300
        if not (text.isascii() and text.isdigit() and len(text) <= 3) or not (
            1 <= int(text) <= TOP_MINUTES
        ):
            raise invalid("minutes", f"an integer from 1 to {TOP_MINUTES}, got {shown(text, 20)}")
        digest = None if service.gate.authorized(request) else service.gate.digest
        try:
            return JSON(await history.top(names, int(text), digest))
        except Problem:  # the history is off
            raise
        except Exception as exc:  # a redis-py error: the store did not answer
            raise Problem(503, "the store did not answer for the top keys") from exc

    async def stats_history(request: Request) -> Response:
        names = asked(request)
        try:
            rules = {n: [r.id for r in guard.policies[n].rules] for n in names}
            return JSON(await history.read(rules))
        except Problem:  # the history is off
            raise
        except Exception as exc:  # a redis-py error: the store did not answer
            raise Problem(503, "the store did not answer for the decisions' history") from exc

    works = {
        "hit": hit,
        "hitMany": hit_many,
        "peek": peek,
        "refund": refund,
        "reset": reset,
        "limits": limits,
        "denials": denials,
        "setLimit": set_limit,
        "clearLimit": clear_limit,
    }
    reads = {
        "healthz": healthz,
        "readyz": readyz,
        "metrics": metrics_page,
        "openapi": openapi,
        "page": page,
        "policies": listed,
        "stats": stats,
        "statsHistory": stats_history,
        "statsTop": stats_top,
    }
    calls: dict[str, dict[str, tuple[type[msgspec.Struct], Work]]] = {}
    for call in CALLS:
        calls.setdefault(f"{BASE}/{call.path}", {})[call.method] = (call.body, works[call.id])
    routes = [Route(path, service.endpoint(by), methods=list(by)) for path, by in calls.items()]
    routes += [Route(read.path, reads[read.id]) for read in READS]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await history.aclose()
        await guard.aclose()

    starlette = Starlette(routes=routes, exception_handlers=HANDLERS, lifespan=lifespan)
    app = Calls(starlette, routes)
    return app if hosts is None else HostCheck(app, hosts)
