"""What every HTTP integration shares: routes to limits, key functions, the 429 body.

Key functions take a :class:`RequestInfo` (method, path, headers, peer, path parameters, and
the raw ASGI scope or WSGI environ) and return a mapping of dimension to value, or one value
(the dimension ``key``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from freqguard.decision import Decision
from freqguard.errors import ConfigError, shown
from freqguard.headers import whole_seconds
from freqguard.integrations._client_ip import client_ip
from freqguard.integrations._methods import check_methods, view_methods
from freqguard.integrations._request import (
    BadRequest,
    KeyFunc,
    RequestInfo,
    SkipRequest,
    check_key,
    context_of,
    dimensions_of,
    header,
    path_param,
)
from freqguard.integrations._routes import check_pattern
from freqguard.integrations._rule_items import check_cost, rule_items
from freqguard.policy import Policy, check_on_error
from freqguard.rates import Rate
from freqguard.rules import Rule, TierRates, check_name, fit_name

__all__ = [
    "LIMITER_ARGUMENTS",
    "BadRequest",
    "KeyFunc",
    "Limit",
    "RequestInfo",
    "SkipRequest",
    "bad_request_body",
    "check_keyed",
    "check_methods",
    "client_ip",
    "context_of",
    "header",
    "keyed_items",
    "path_param",
    "problem_body",
    "problem_detail",
    "refuse_slowapi",
    "rekeyed",
    "view_methods",
]


class Limit:
    """Requests matching ``path`` (and ``methods``) are capped by ``rule``, keyed by ``key``.

    A Limit is an immutable description: each middleware compiles it once, when it is
    built, and registers its policy on the guard once (at the first request when the
    policy's dimensions come from the key function).

    Args:
        path: a route pattern, matched as Starlette matches it: ``/api/sms``,
            ``/users/{user_id}``, ``/users/{user_id:int}``, ``/static/{rest:path}`` (the
            convertors ``str``, ``path``, ``int``, ``float``, ``uuid``, and any registered
            with Starlette). Under ASGI it is matched against the path below ``root_path``
            (a ``Mount``, ``--root-path``), under WSGI against ``PATH_INFO``.
        rule: a rate string (several with ``;``), a Rule, a list of them, or a Policy.
        key: a key function (default :func:`client_ip` with no trusted proxies).
        methods: HTTP methods (default: all). HEAD is a GET without the body, so a limit on
            GET also takes HEAD, on the same counter.
        cost: how much one request costs.
        name: the policy's name (default: the methods and path, readable, with a digest of
            them, so that no two routes share one; it names the keys in the store). A 429
            names the policy only when it was given.
        on_error: what the route answers when the store fails: ``"allow"`` (fail open),
            ``"deny"`` (fail closed: 429 with a ``Retry-After``), a fallback backend, or
            ``"raise"``: a 503 problem document with a ``Retry-After``, never a bare 500.
            Default (None): the guard's. For a Policy, set it on the Policy.

    Raises:
        ConfigError: for a pattern that cannot match (not starting with ``/``, an unknown
            convertor, unbalanced braces, a bad or repeated parameter name), a rate that
            does not parse, a rule that is not a rate string, Rule or Policy, a bad name
            or ``on_error``, a cost that is not an integer >= 0 its narrowest rule holds.
    """

    __slots__ = ("cost", "items", "key", "methods", "name", "named", "on_error", "path", "rule")

    path: str
    rule: str | Rule | Policy | Sequence[str | Rule]
    key: KeyFunc
    methods: frozenset[str] | None
    cost: int
    name: str
    named: bool  # name given: a 429 names the policy
    on_error: object  # "raise" | "allow" | "deny" | a backend | None (the guard's)
    items: tuple[Rate | Rule, ...] | Policy  # the rule, parsed

    def __init__(
        self,
        path: str,
        rule: str | Rule | Policy | Sequence[str | Rule],
        *,
        key: KeyFunc | None = None,
        methods: Iterable[str] | None = None,
        cost: int = 1,
        name: str | None = None,
        on_error: object = None,
        **theirs: NoReturn,
    ) -> None:
        refuse_slowapi(theirs, "Limit", f"Limit({shown(path)})")
        chosen = check_methods(methods)
        methods_text = "-".join(sorted(chosen or ["ANY"]))
        fields = {
            "path": check_pattern(path),
            "rule": rule,
            "key": client_ip() if key is None else check_key(key, f"Limit({shown(path)})"),
            "methods": chosen,
            "cost": cost,
            "name": check_name(
                "limit name", fit_name(f"http.{methods_text}{path}") if name is None else name
            ),
            "named": name is not None,
            "items": rule if isinstance(rule, Policy) else keyed_items(rule, key, path),
            "on_error": _check_on_error(on_error, rule, path),
        }
        items: Any = fields["items"]
        rules = items.rules if isinstance(items, Policy) else items
        check_cost(cost, rules, f"Limit({shown(path)}): ")
        for field, value in fields.items():
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Limit is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Limit is immutable: cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"Limit({self.path!r}, {self.rule!r}, name={self.name!r})"


#: slowapi's ``limit()`` arguments, and freqguard's way for each.
_THEIRS = {
    "key_func": "key= here, a function of the request (client_ip(), header(...))",
    "per_method": "each method its own budget: a Limit per method (methods=[...]), or the "
    "method in the key: key=lambda r: {'client': r.client, 'method': r.method}",
    "exempt_when": "raise SkipRequest in the key function for a request left uncapped",
    "error_message": "the 429 is a problem document whose detail names the rule and the wait",
    "override_defaults": "a Limit is one list, the first that matches decides: put the "
    "narrower first",
    "scope": "name= here: the Limits given one name share one budget",
}


#: slowapi's ``Limiter()`` arguments, given to the middleware, and freqguard's way for each.
LIMITER_ARGUMENTS = {
    "key_func": "key= on each Limit, Limit(path, rate, key=client_ip()) (get_remote_address)",
    "default_limits": "a catch-all Limit, last in limits=: Limit('/{rest:path}', '100/minute', "
    "key=lambda r: {'client': r.client, 'path': r.path}) (each path its own budget)",
    "application_limits": "a catch-all Limit, last in limits=: Limit('/{rest:path}', "
    "'1000/hour') (one budget for every route)",
    "headers_enabled": "headers='x-ratelimit' for X-RateLimit-* (the default 'ietf' sends "
    "RateLimit-Policy and RateLimit; 'none' none)",
    "storage_uri": "the guard's backend, guard=AsyncGuard(async_backend_from_url(uri))",
    "strategy": "a Rule's, Limit(path, Rule('5/minute', strategy='fixed-window')) (the "
    "default, the sliding log, is limits' moving-window)",
    "key_prefix": "the guard's, guard=AsyncGuard(backend, prefix=...)",
    "in_memory_fallback_enabled": "the guard's on_error, a fallback backend: "
    "guard=AsyncGuard(backend, on_error=MemoryBackend())",
    "swallow_errors": "the guard's on_error, guard=AsyncGuard(backend, on_error='allow')",
}


def refuse_slowapi(
    theirs: Mapping[str, object], owner: str, where: str, ways: Mapping[str, str] = _THEIRS
) -> None:
    """slowapi's ``limit()`` arguments given to ``owner`` (``Limit``, ``limit_dependency``),
    or its ``Limiter()``'s (``ways``) to the middleware, refused naming freqguard's way (any
    other name a TypeError, as Python would)."""
    for name in theirs:
        if name in ways:
            raise ConfigError(
                f"{where}: slowapi's {name}= is not {owner}'s: {ways[name]} "
                "(docs/coming-from/slowapi.md)"
            )
        raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


def _check_on_error(on_error: object, rule: object, path: str) -> object:
    if on_error is None:
        return None
    if isinstance(rule, Policy):
        raise ConfigError(
            f"Limit({shown(path)}): on_error={on_error!r} goes on the Policy it is given "
            f"(Policy({rule.name!r}, ..., on_error=...))"
        )

    return check_on_error(on_error, f"Limit({shown(path)})")


def keyed_items(rule: object, key: KeyFunc | None, where: str) -> tuple[Rate | Rule, ...]:
    """:func:`rule_items`, checked against the dimensions ``key`` says it gives (default:
    :func:`client_ip`'s), when it says them (see :func:`check_keyed`)."""
    items = rule_items(rule, f"Limit({where!r})")
    given = dimensions_of(key or client_ip())
    if given is not None:
        check_keyed(f"Limit({where!r})", items, given)
    return items


def check_keyed(where: str, items: Sequence[Rate | Rule], given: Sequence[str]) -> list[Rule]:
    """The rules ``items`` make under a key that gives ``given``: a rate, and a Rule keyed by
    nothing (``Rule("4 concurrent", lease=120)``), take the key's dimensions (one budget per
    key); a Rule keyed by its own ``by`` keeps it.

    Raises:
        ConfigError: a Rule keyed by a dimension the key does not give, or a key that gives
            one no rule takes (a hit would be refused for it): both named.
    """
    rules = [
        Rule(item, by=given)
        if isinstance(item, Rate)
        else item
        if item.by
        else rekeyed(item, given)
        for item in items
    ]
    taken = {d for rule in rules for d in (*rule.by, *rule.reads)}
    shown = ", ".join(given) or "none"
    for rule in rules:
        missing = [d for d in rule.by if d not in given]
        if missing:
            raise ConfigError(
                f"{where}: the key gives {shown}; rule {rule.id!r} takes {', '.join(rule.by)} "
                f"({', '.join(missing)} never given): key the rule by the key's dimensions, "
                f"or give a key that returns {', '.join(missing)}"
            )
    unused = [d for d in given if d not in taken]
    if unused:
        raise ConfigError(
            f"{where}: the key gives {shown}, which no rule takes ({', '.join(unused)}): key "
            f"a rule by it (by=...), or give a key that returns only what the rules take"
        )
    return rules


def rekeyed(rule: Rule, by: Sequence[str], name: str | None = None) -> Rule:
    """``rule`` keyed by ``by`` (a route's key) instead of nothing, or named ``name``; its
    id stays otherwise (it names no dimension). Made again by its constructor, so every
    check holds (a dimension the rule reads as a value cannot key it; a table's own read
    becomes its key, as a rule keyed by it may tier by it)."""
    tier = rule.rate_for.read if isinstance(rule.rate_for, TierRates) else None
    return Rule(
        rule.rate,
        by,
        rule.strategy,
        name=name or rule.name,
        burst=rule.burst,
        shadow=rule.shadow,
        rate_for=rule.rate_for,
        reads=[read for read in rule.reads if not (read == tier and read in by)],
        calendar=rule.calendar,
        tz=rule.tz,
        tz_from=rule.tz_from,
        only=rule.only,
        caps=dict(rule.caps) or None,
    )


def problem_body(
    decision: Decision, instance: str | None, named: bool = True, detail: str | None = None
) -> bytes:
    """An RFC 9457 problem document for a denied request; ``named``: it names the policy
    (not one whose name the route made for itself); ``detail``, if not when to retry."""
    shown = {"policy": decision.policy} if named else {}
    return _problem(
        429,
        "Too Many Requests",
        problem_detail(decision) if detail is None else detail,
        instance,
        violated_policies=[rule.id for rule in decision.denied_by],
        **shown,
    )


def bad_request_body(error: BadRequest, instance: str) -> bytes:
    """An RFC 9457 problem document for a request that cannot be keyed."""
    return _problem(400, "Bad Request", str(error), instance)


def unavailable_body(retry_after: float, instance: str | None) -> bytes:
    """An RFC 9457 problem document for a request the store could not decide."""
    detail = (
        "The rate limiter's store is unavailable; retry after "
        f"{whole_seconds(retry_after)} seconds."
    )
    return _problem(503, "Service Unavailable", detail, instance)


def problem_detail(decision: Decision) -> str:
    """The ``detail`` of a 429 problem document."""
    return f"Rate limit exceeded; retry after {whole_seconds(decision.retry_after)} seconds."


def _problem(status: int, title: str, detail: str, instance: str | None, **extra: object) -> bytes:
    document: dict[str, object] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance is not None:  # unknown where enforce() is called without the request
        document["instance"] = instance
    return json.dumps({**document, **extra}).encode()
