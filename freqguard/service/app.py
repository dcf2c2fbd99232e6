"""The decision service's Starlette app: a configuration's policies behind HTTP/JSON.

    POST /v1/policies/{policy}/hit        {"context": {...}, "cost": 1}  -> a decision
    POST /v1/policies/{policy}/hit-many   {"contexts": [...], "cost": 1} -> {"decisions": [...]}
    POST /v1/policies/{policy}/peek       {"context": {...}}             -> a decision
    POST /v1/policies/{policy}/refund     {"context": {...}, "cost": 1}  -> a decision
    POST /v1/policies/{policy}/reset      {"context": {...}}             -> {"reset": true}
    POST /v1/policies/{policy}/limits     {"context": {...}}             -> {"limits": {...}}
    PUT  /v1/policies/{policy}/limits/{rule}  {"context", "rate", "ttl"} -> {"limits": {...}}
    DELETE /v1/policies/{policy}/limits/{rule} {"context": {...}}        -> {"limits": {...}}
    GET  /healthz, /metrics, /openapi.json
    GET  /  (the operator's page), /v1/policies, /v1/stats  (what the page reads; open)

A denial is a 200 with ``"allowed": false`` (the call succeeded); a bad body is a 422
problem+json naming the field; an unknown policy or rule a 404; a body over the size limit a
413; the store failing a 503. With tokens configured every ``/v1`` call needs
``Authorization: Bearer <token>`` (compared in constant time, never logged).
"""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from freqguard.decision import Decision
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard
from freqguard.policy import Policy
from freqguard.service.openapi import document
from freqguard.service.page import PAGE

__all__ = ["MAX_BATCH", "MAX_BODY", "create_app", "decision_json"]

MAX_BODY = 1 << 20  # bytes of one request's body
MAX_BATCH = 1000  # contexts of one hit-many call

Handler = Callable[[Request], Awaitable[Response]]


class Problem(Exception):
    """An answer other than 200, as RFC 9457 problem+json."""

    def __init__(self, status: int, title: str, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.field = status, title, detail, field

    def response(self, instance: str) -> Response:
        body: dict[str, Any] = {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
        }
        if self.field is not None:
            body["field"] = self.field
        return Response(json.dumps(body), self.status, media_type="application/problem+json")


def _invalid(field: str, detail: str) -> Problem:
    return Problem(422, "Unprocessable Content", f"{field}: {detail}", field)


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as the service answers it."""
    return {
        "allowed": decision.allowed,
        "retry_after": decision.retry_after,
        "remaining": decision.remaining,
        "limit": decision.capacity,
        "reset_after": decision.reset_after,
        "denied_by": [rule.id for rule in decision.denied_by],
        "rules": [
            {
                "rule": state.rule.id,
                "allowed": state.allowed,
                "remaining": state.remaining,
                "limit": state.capacity,
                "reset_after": state.reset_after,
                "retry_after": state.retry_after,
                "shadow": state.rule.shadow,
            }
            for state in decision.rules
        ],
        "source": decision.source,
    }


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read up to :data:`MAX_BODY` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise Problem(413, "Content Too Large", f"a body is at most {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise Problem(413, "Content Too Large", f"a body is at most {MAX_BODY} bytes")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        raise _invalid("body", "not JSON") from None
    if not isinstance(body, dict):
        raise _invalid("body", "a JSON object")
    return body


def _context(body: Mapping[str, Any], name: str = "context") -> dict[str, Any]:
    context = body.get(name)
    if not isinstance(context, dict):
        raise _invalid(name, "an object of name: value (strings or integers)")
    for key, value in context.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _invalid(f"{name}.{key}", f"a string or an integer, got {value!r}")
    return context


def _cost(body: Mapping[str, Any]) -> int:
    cost = body.get("cost", 1)
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise _invalid("cost", f"an integer >= 0, got {cost!r}")
    return cost


class Service:
    """The app's state: the guard, the tokens, the policies it knows."""

    def __init__(self, guard: AsyncGuard, tokens: Sequence[str], metrics: Any) -> None:
        self.guard, self.metrics = guard, metrics
        self._tokens = [token.encode() for token in tokens if token]

    def authorized(self, request: Request) -> bool:
        if not self._tokens:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        offered = given.strip().encode()
        return any(hmac.compare_digest(offered, token) for token in self._tokens)

    def policy(self, request: Request) -> str:
        name = request.path_params["policy"]
        if name not in self.guard.policies:
            known = ", ".join(sorted(self.guard.policies))
            raise Problem(404, "Not Found", f"no policy {name!r} (policies: {known})")
        return str(name)


def _endpoint(service: Service, work: Callable[[Request], Awaitable[Any]]) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            if not service.authorized(request):
                return Response(
                    json.dumps({"title": "Unauthorized", "status": 401}),
                    401,
                    {"www-authenticate": "Bearer"},
                    media_type="application/problem+json",
                )
            return JSONResponse(await work(request))
        except Problem as problem:
            return problem.response(request.url.path)
        except BackendUnavailable as exc:
            return Problem(503, "Service Unavailable", f"the store failed: {exc}").response(
                request.url.path
            )
        except ConfigError as exc:  # a context the policy cannot decide, a bad rate
            return _invalid("context", str(exc)).response(request.url.path)

    return handle


#: The page runs its own inline script and style, and talks to this origin only.
_CSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


def _policy_json(policy: Policy) -> dict[str, Any]:
    """A policy as the page lists it: its rules, the context a lookup asks for, and the
    partition values its per-key limits are kept by."""
    parts = {r.by[0] for r in policy.rules if r.by and all(r.by[0] in x.by for x in policy.rules)}
    return {
        "policy": policy.name,
        "context": [*policy.dimensions, *policy.reads],
        "partition": sorted(parts) or list(policy.dimensions[:1]),
        "rules": [
            {
                "rule": rule.id,
                "by": list(rule.by),
                "rate": str(rule.rate) if rule.quiet is None else "quiet hours",
                "strategy": "calendar" if rule.calendar else rule.strategy.value,
            }
            for rule in policy.rules
        ],
    }


def _stats(registry: Any) -> list[dict[str, Any]]:
    """Per policy: allowed and denied decisions; per rule: its denials (from the metrics)."""
    if registry is None:
        return []
    totals: dict[str, dict[str, float]] = {}
    rules: dict[tuple[str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "freqguard_decisions_total":
                entry = totals.setdefault(labels["policy"], {"allowed": 0.0, "denied": 0.0})
                outcome = "allowed" if labels.get("outcome") == "allowed" else "denied"
                entry[outcome] += sample.value
            elif sample.name == "freqguard_denials_total":
                rules[labels["policy"], labels["rule"]] = sample.value
    rows: list[dict[str, Any]] = []
    for name, entry in sorted(totals.items()):
        rows.append({"policy": name, "rule": None, **{k: int(v) for k, v in entry.items()}})
        rows += [
            {"policy": name, "rule": rule, "allowed": None, "denied": int(count)}
            for (policy, rule), count in sorted(rules.items())
            if policy == name
        ]
    return rows


def create_app(guard: AsyncGuard, tokens: Sequence[str] = (), metrics: Any = None) -> Starlette:
    """The service's app on ``guard`` (its policies), requiring one of ``tokens`` if any;
    ``metrics``: a ``prometheus_client`` registry ``/metrics`` exposes, if given."""
    service = Service(guard, tokens, metrics)

    async def hit(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        return decision_json(await guard.hit(policy, _cost(body), **_context(body)))

    async def hit_many(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        contexts = body.get("contexts")
        if not isinstance(contexts, list) or not 0 < len(contexts) <= MAX_BATCH:
            raise _invalid("contexts", f"a list of 1 to {MAX_BATCH} contexts")
        checked = [_context({"c": c}, "c") for c in contexts]
        decisions = await guard.hit_many(policy, checked, _cost(body))
        return {"decisions": [decision_json(d) for d in decisions]}

    async def peek(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        return decision_json(await guard.peek(policy, **_context(body)))

    async def refund(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        return decision_json(await guard.refund(policy, _cost(body), **_context(body)))

    async def reset(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        await guard.reset(policy, **_context(body))
        return {"reset": True}

    async def limits(request: Request) -> Any:
        policy, body = service.policy(request), await _body(request)
        context = _context(body)
        rule = request.path_params.get("rule")
        if rule is not None and rule not in {r.id for r in guard.policies[policy].rules}:
            raise Problem(404, "Not Found", f"policy {policy!r} has no rule {rule!r}")
        if request.method == "PUT":
            rate, ttl = body.get("rate"), body.get("ttl")
            if rate is not None and not isinstance(rate, str):
                raise _invalid("rate", f'a rate string ("60/minute") or null, got {rate!r}')
            if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))):
                raise _invalid("ttl", f"seconds, or null for ever, got {ttl!r}")
            await guard.set_limit(policy, str(rule), rate, ttl=ttl, **context)
        elif request.method == "DELETE":
            await guard.clear_limit(policy, str(rule), **context)
        found = await guard.limits_for(policy, **context)
        return {"limits": {r: None if rate is None else str(rate) for r, rate in found.items()}}

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "policies": sorted(guard.policies)})

    async def metrics_page(request: Request) -> Response:
        if service.metrics is None:
            return Response("", 404)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(service.metrics), media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document(sorted(guard.policies)))

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE, headers={"content-security-policy": _CSP})

    async def listed(request: Request) -> Response:
        return JSONResponse({"policies": [_policy_json(p) for p in guard.policies.values()]})

    async def stats(request: Request) -> Response:
        return JSONResponse({"rows": _stats(service.metrics)})

    base = "/v1/policies/{policy}"
    routes = [
        Route(f"{base}/hit", _endpoint(service, hit), methods=["POST"]),
        Route(f"{base}/hit-many", _endpoint(service, hit_many), methods=["POST"]),
        Route(f"{base}/peek", _endpoint(service, peek), methods=["POST"]),
        Route(f"{base}/refund", _endpoint(service, refund), methods=["POST"]),
        Route(f"{base}/reset", _endpoint(service, reset), methods=["POST"]),
        Route(f"{base}/limits", _endpoint(service, limits), methods=["POST"]),
        Route(f"{base}/limits/{{rule}}", _endpoint(service, limits), methods=["PUT", "DELETE"]),
        Route("/healthz", healthz),
        Route("/metrics", metrics_page),
        Route("/openapi.json", openapi),
        Route("/", page),
        Route("/v1/policies", listed),
        Route("/v1/stats", stats),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await guard.aclose()

    return Starlette(routes=routes, lifespan=lifespan)
