"""The one request-decision path every HTTP integration takes.

Routes are compiled once (:func:`compile_limit`, or a Flask endpoint's route built once);
a request is matched to one, keyed into a context, hit on the guard, and answered. The
ASGI middleware, the FastAPI dependency, the WSGI middleware and the Flask extension differ
only in how they read a request, whether the hit is awaited, and how they send the answer.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import (
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)

from freqguard.decision import Decision
from freqguard.engine.requests import Unfit
from freqguard.errors import BackendUnavailable, ContextError
from freqguard.guard import AsyncGuard, Guard
from freqguard.headers import HeaderPlan, header_plan, whole_seconds
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    Limit,
    RequestInfo,
    SkipRequest,
    bad_request_body,
    check_keyed,
    context_of,
    problem_body,
    rekeyed,
    unavailable_body,
)
from freqguard.integrations._request import dimensions_of, refuse_empty
from freqguard.integrations._routes import PathPattern
from freqguard.options import fit_name
from freqguard.policy import Policy
from freqguard.rates import Rate
from freqguard.rules import Rule

__all__ = [
    "Answer",
    "Decider",
    "KeyedRules",
    "Route",
    "answer_for",
    "bad_request",
    "compile_limit",
    "preflight",
    "refusal",
]

_NO_PARAMS: Mapping[str, str] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class KeyedRules:
    """One key function and the rules it keys: rates take the key's dimensions, Rules keep
    their own ``by``; ``label`` prefixes the rules' names (Flask's ``default``)."""

    key: KeyFunc
    items: tuple[Rate | Rule, ...]
    label: str = ""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: cheap
class Route:
    """A compiled route: what to match, how to key, which policy to hit at what cost.

    ``policy`` is set when the rules do not depend on the key's dimensions (a Policy, or
    Rules only); otherwise the policy is built from the first request's context.
    """

    name: str
    keyed: tuple[KeyedRules, ...]
    cost: int = 1
    regex: PathPattern | None = None  # None: every path
    methods: frozenset[str] | None = None  # None: every method; GET brings HEAD
    policy: Policy | None = None
    on_error: object = None  # the policy's, when built here
    named: bool = True  # a 429 names the policy (not a name a Limit made for itself)

    def match(self, method: str, path: str) -> Mapping[str, str] | None:
        if self.methods is not None and method not in self.methods:
            return None
        if self.regex is None:
            return _NO_PARAMS
        found = self.regex.match(path)
        return None if found is None else found if self.regex.groups else _NO_PARAMS

    def context(self, info: RequestInfo) -> tuple[dict[str, object], tuple[tuple[str, ...], ...]]:
        """The hit's context, and the dimensions of each of :attr:`keyed` in it.

        Raises:
            BadRequest: a key function refuses the request.
        """
        if len(self.keyed) == 1:
            ctx = context_of(self.keyed[0].key, info)
            if not ctx:
                refuse_empty(self.keyed[0].key, self.keyed[0].items)
            return ctx, (tuple(ctx),)
        ctx = {}
        dims: list[tuple[str, ...]] = []
        asked: dict[int, tuple[str, ...]] = {}  # by the key function's id: it may not hash
        for keyed in self.keyed:
            by = asked.get(id(keyed.key))
            if by is None:
                found = context_of(keyed.key, info)
                if not found:
                    refuse_empty(keyed.key, keyed.items)
                # two different key functions naming one dimension: the second is renamed,
                # so neither's value stands in for the other's
                renamed = {(f"view_{d}" if d in ctx else d): v for d, v in found.items()}
                ctx.update(renamed)
                by = asked[id(keyed.key)] = tuple(renamed)
            dims.append(by)
        return ctx, tuple(dims)

    def build(self, dims: tuple[tuple[str, ...], ...]) -> Policy:
        """The route's policy, for the dimensions its key functions gave: rates and Rules
        keyed by nothing take their key's (one budget per key).

        Raises:
            ConfigError: a Rule keyed by a dimension its key does not give, or a key that
                gives one no rule takes (:func:`check_keyed`).
        """
        if self.policy is not None:
            return self.policy
        rules: list[Rule] = []
        for keyed, by in zip(self.keyed, dims, strict=True):
            made = check_keyed(f"route {self.name!r}", keyed.items, by)
            for item, rule in zip(keyed.items, made, strict=True):
                if keyed.label and isinstance(item, Rate):
                    rule = Rule(item, by=by, name=f"{keyed.label}.{rule.id}")
                elif keyed.label == "default":  # a default Rule, named apart as a rate is
                    rule = rekeyed(rule, rule.by, fit_name(f"default.{rule.id}"))
                rules.append(rule)
        return Policy(self.name, *rules, on_error=self.on_error)


def compile_limit(limit: Limit) -> Route:
    """A :class:`Limit` as a route: its pattern as a regex, HEAD matched with GET."""
    regex = PathPattern(limit.path)
    methods = limit.methods
    if methods is not None and "GET" in methods:
        # servers answer HEAD by running the GET handler: it must not be a free GET
        methods = methods | {"HEAD"}
    if isinstance(limit.items, Policy):
        policy = limit.items  # hit by its own name
        return Route(policy.name, (KeyedRules(limit.key, ()),), limit.cost, regex, methods, policy)
    keyed = (KeyedRules(limit.key, limit.items),)
    route = Route(
        limit.name, keyed, limit.cost, regex, methods, on_error=limit.on_error, named=limit.named
    )
    given = dimensions_of(limit.key)
    if given is not None:  # known now: registered now
        return dataclasses.replace(route, policy=route.build((given,)))
    return route


class Answer:
    """What to send: the status, the headers (rate-limit headers, and on a refusal the
    problem document's content type and length) and the body (empty when allowed).

    The headers are built when first asked for, as text (``headers``) or as the byte pairs
    an ASGI server takes (:meth:`raw_headers`): each integration pays for the form it sends.
    """

    __slots__ = ("_headers", "_plan", "body", "decision", "status", "unfit")

    def __init__(
        self,
        status: int,
        body: bytes,
        decision: Decision | None,
        plan: HeaderPlan | None,
        headers: dict[str, str] | None = None,
        unfit: bool = False,
    ) -> None:
        self.status, self.body, self.decision = status, body, decision
        self._plan, self._headers = plan, headers
        self.unfit = unfit  # a denial no retry can turn: no Retry-After

    @property
    def allowed(self) -> bool:
        return self.status < 400

    @property
    def headers(self) -> dict[str, str]:
        headers = self._headers
        if headers is None:
            # only an allowed answer is made without its headers (see answer_for)
            assert self._plan is not None
            assert self.decision is not None
            headers = self._headers = self._plan.fields(self.decision)
        return headers

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers as ASGI sends them: lower-case names, latin-1 bytes."""
        if self._headers is None and self._plan is not None and self.decision is not None:
            return self._plan.raw(self.decision)  # allowed: straight from the plan
        return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]


def refusal(status: int, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
    """A problem document's headers, then ``headers``."""
    return {
        "Content-Type": "application/problem+json",
        "Content-Length": str(len(body)),
        **headers,
    }


def answer_for(
    decision: Decision,
    profile: str,
    instance: str | None,
    plan: HeaderPlan | None = None,
    named: bool = True,
    unfit: Unfit | None = None,
) -> Answer:
    """The answer to a decision: its rate-limit headers, and a 429 problem if denied.

    ``plan`` is the decision's policy's :class:`HeaderPlan` in ``profile``, when known;
    ``named``: the problem names the policy. ``unfit``: the decision is the denial of a
    cost past its request's capacity, which no retry turns: the problem says so, and no
    ``Retry-After`` promises a time it would be allowed.
    """
    if plan is None:
        plan = header_plan(tuple(entry[0] for entry in decision.raw), profile)
    if decision.allowed:
        return Answer(200, b"", decision, plan)
    fields = plan.fields(decision)
    if unfit is not None:
        del fields["Retry-After"]
    body = problem_body(decision, instance, named, None if unfit is None else str(unfit))
    return Answer(429, body, decision, plan, refusal(429, body, fields), unfit is not None)


def unavailable(error: BackendUnavailable, instance: str | None) -> Answer:
    """The answer to a request the store could not decide (its ``on_error`` is ``"raise"``):
    503 with a problem document and a ``Retry-After``, never a bare 500."""
    wait = getattr(error, "retry_after", 1.0)
    body = unavailable_body(wait, instance)
    return Answer(
        503, body, None, None, refusal(503, body, {"Retry-After": str(max(whole_seconds(wait), 1))})
    )


def bad_request(error: BadRequest, instance: str) -> Answer:
    """The answer to a request its key function refuses: 400 with a problem document."""
    body = bad_request_body(error, instance)
    return Answer(400, body, None, None, refusal(400, body, {}))


class Decider:
    """Compiled routes on one guard: match, key, register each policy once, answer.

    A policy whose rules are known is registered here; one built from the key's dimensions
    is registered at its route's first request, under a lock, and never again. ``register``
    registers a route's policy in place of ``guard.add_policy`` (Django's: a policy whose
    rules changed with the settings replaces its older version).
    """

    def __init__(
        self,
        guard: Guard | AsyncGuard,
        routes: Sequence[Route] = (),
        profile: str = "ietf",
        register: Callable[[Route, Policy], None] | None = None,
    ) -> None:
        self.routes = tuple(routes)
        self.profile = profile
        add = guard.add_policy
        self._policies: Callable[[], Mapping[str, Policy]] = lambda: guard.policies
        self._add_policy = register or (lambda route, policy: add(policy))
        self._gone: dict[Route, None] = {}  # the latest routes forgotten (forget), in order
        # routes whose policy is registered on the guard, with its headers: by route, not
        # by name, so two routes naming one policy with different rules still fail as
        # add_policy does
        self._ready: dict[Route, HeaderPlan] = {}
        self._lock = threading.Lock()
        for route in self.routes:
            if route.policy is not None:
                self._register(route, route.policy)

    def find(
        self, method: str, path: str, preflight: bool = False
    ) -> tuple[Route, Mapping[str, str]] | None:
        """The first route matching the request, and the path's parameters. A CORS
        ``preflight`` (an ``OPTIONS`` asking leave for another method) is the browser's
        question, not a call: only a route whose methods name ``OPTIONS`` counts it."""
        for route in self.routes:
            if preflight and (route.methods is None or "OPTIONS" not in route.methods):
                continue
            params = route.match(method, path)
            if params is not None:
                return route, params
        return None

    def prepare(self, route: Route, info: RequestInfo) -> dict[str, object]:
        """The context to hit ``route.name`` with; registers the policy the first time.

        Raises:
            BadRequest: a key function refuses the request.
        """
        ctx, dims = route.context(info)
        if route not in self._ready:
            self._register(route, route.build(dims))
        return ctx

    def _register(self, route: Route, policy: Policy) -> None:
        with self._lock:
            if route in self._gone:  # replaced on its way here: the policy as it is now
                if policy.name not in self._policies():  # decides it (none yet: its own)
                    self._add_policy(route, policy)
            elif route not in self._ready:
                self._add_policy(route, policy)
                self._ready[route] = header_plan(policy.rules, self.profile)

    def forget(self, route: Route) -> None:
        """Drop a route another replaced (a DRF throttle's rates changed): a request still
        on its way with it is decided on the policy as registered now, never registering
        the older rules again, and builds its headers from its decision."""
        with self._lock:
            self._ready.pop(route, None)
            self._gone[route] = None
            if len(self._gone) > 64:  # bounded: a request outlives few replacements
                del self._gone[next(iter(self._gone))]

    def answer(
        self,
        decision: Decision,
        instance: str | None,
        route: Route | None = None,
        unfit: Unfit | None = None,
    ) -> Answer:
        """The answer to a decision (of ``route``, when known: its headers are built;
        ``unfit``: see :func:`answer_for`)."""
        plan = None if route is None else self._ready.get(route)  # None: forgotten since
        if decision.allowed and plan is not None:  # the usual case, in one call
            return Answer(200, b"", decision, plan)
        named = route is None or route.named
        return answer_for(decision, self.profile, instance, plan, named, unfit)

    def decide(self, hit: Callable[..., Decision], route: Route, info: RequestInfo) -> Answer:
        """Key, hit (``Guard.hit``) and answer one request."""
        try:
            ctx = self.prepare(route, info)
        except BadRequest as error:
            return bad_request(error, info.path)
        except SkipRequest:  # header(..., missing="skip"): this request goes uncapped
            return Answer(200, b"", None, None, {})
        try:
            decision = hit(route.name, route.cost, **ctx)
        except BackendUnavailable as error:
            return unavailable(error, info.path)
        except ContextError as error:  # the request's own zone or priority
            return bad_request(BadRequest(str(error)), info.path)
        except Unfit as error:  # a cost past this request's capacity (a per-key limit's,
            return self.answer(error.decision, info.path, route, error)  # a priority's)
        return self.answer(decision, info.path, route)

    async def adecide(
        self, hit: Callable[..., Awaitable[Decision]], route: Route, info: RequestInfo
    ) -> Answer:
        """As :meth:`decide`, with ``AsyncGuard.hit``."""
        try:
            ctx = self.prepare(route, info)
        except BadRequest as error:
            return bad_request(error, info.path)
        except SkipRequest:
            return Answer(200, b"", None, None, {})
        try:
            decision = await hit(route.name, route.cost, **ctx)
        except BackendUnavailable as error:
            return unavailable(error, info.path)
        except ContextError as error:  # the request's own zone or priority
            return bad_request(BadRequest(str(error)), info.path)
        except Unfit as error:
            return self.answer(error.decision, info.path, route, error)
        return self.answer(decision, info.path, route)


def preflight(method: str | None, environ: Mapping[str, object]) -> bool:
    """Whether a request (its method, and its WSGI environ or Django ``META``) is a CORS
    preflight: an ``OPTIONS`` asking leave for another method, from a browser, which
    sends ``Origin`` with it (without it, any client's ``OPTIONS`` would pass by one
    header). The ASGI middleware reads the same two headers off its scope."""
    return (
        method == "OPTIONS"
        and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in environ
        and "HTTP_ORIGIN" in environ
    )
