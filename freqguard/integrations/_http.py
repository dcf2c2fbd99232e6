"""What every HTTP integration shares: routes to limits, key functions, the 429 body.

Key functions take a :class:`RequestInfo` (method, path, headers, peer, path parameters, and
the raw ASGI scope or WSGI environ) and return a mapping of dimension to value, or one value
(the dimension ``key``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from freqguard.decision import Decision
from freqguard.errors import ConfigError
from freqguard.headers import whole_seconds
from freqguard.integrations._client_ip import client_ip
from freqguard.integrations._request import BadRequest, KeyFunc, RequestInfo, context_of
from freqguard.policy import Policy
from freqguard.rates import parse_rates
from freqguard.rules import Rule, check_name

__all__ = [
    "BadRequest",
    "KeyFunc",
    "Limit",
    "RequestInfo",
    "bad_request_body",
    "client_ip",
    "context_of",
    "find",
    "header",
    "path_param",
    "problem_body",
]


def header(name: str) -> KeyFunc:
    """The value of one request header (empty when absent), as dimension ``name``.

    A request carrying the header on several lines raises :class:`BadRequest` (answered
    400): frameworks disagree on which line the application reads (Starlette the first,
    a raw ASGI app often the last), and a key on any one of them, or on all joined, lets a
    client keep the value the application uses and rotate the key with another line. Under
    WSGI the server has already joined the lines into one value with commas; that value is
    all a WSGI application can read, and it is the key.
    """
    lower = name.lower()
    dimension = re.sub(r"\W", "_", lower)

    def key(request: RequestInfo) -> dict[str, object]:
        lines = request.header_lines(lower)
        if len(lines) > 1:
            raise BadRequest(f"header {name!r} was sent {len(lines)} times; send it once")
        return {dimension: lines[0] if lines else ""}

    return key


def path_param(name: str) -> KeyFunc:
    """A parameter of the matched route pattern (``/users/{user_id}``)."""

    def key(request: RequestInfo) -> dict[str, object]:
        if name not in request.path_params:
            raise ConfigError(f"path_param({name!r}): the route pattern has no such parameter")
        return {name: request.path_params[name]}

    return key


_PARAM = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)(?::path)?}")


class Limit:
    """Requests matching ``path`` (and ``methods``) are capped by ``rule``, keyed by ``key``.

    Args:
        path: a route pattern: ``/api/sms``, ``/users/{user_id}``, ``/static/{rest:path}``.
        rule: a rate string (several with ``;``), a Rule, a list of them, or a Policy.
        key: a key function (default :func:`client_ip` with no trusted proxies).
        methods: HTTP methods (default: all). HEAD is a GET without the body, so a limit on
            GET also takes HEAD, on the same counter.
        cost: how much one request costs.
        name: the policy's name (default derived from the method and path).
    """

    def __init__(
        self,
        path: str,
        rule: str | Rule | Policy | Sequence[str | Rule],
        *,
        key: KeyFunc | None = None,
        methods: Iterable[str] | None = None,
        cost: int = 1,
        name: str | None = None,
    ) -> None:
        if not path.startswith("/"):
            raise ConfigError(f"a route pattern starts with '/', got {path!r}")
        self.path = path
        self.methods = frozenset(m.upper() for m in methods) if methods else None
        # the servers answer HEAD by running the GET handler: it must not be a free GET
        self._matched = (
            self.methods | {"HEAD"} if self.methods and "GET" in self.methods else self.methods
        )
        self.key: KeyFunc = key or client_ip()
        self.cost = cost
        parts, last = [], 0
        for m in _PARAM.finditer(path):
            parts.append(re.escape(path[last : m.start()]))
            wildcard = ":path}" in m.group(0)
            parts.append(f"(?P<{m.group(1)}>{'.*' if wildcard else '[^/]+'})")
            last = m.end()
        parts.append(re.escape(path[last:]))
        self._regex = re.compile("".join(parts) + "$")
        methods_text = "-".join(sorted(self.methods or ["ANY"]))
        default = re.sub(r"[^A-Za-z0-9_.\-]", "-", f"http.{methods_text}{path}")
        self.name = check_name("limit name", name or default[:64])
        self._rule = rule
        self.policy: Policy | None = rule if isinstance(rule, Policy) else None

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self._matched is not None and method.upper() not in self._matched:
            return None
        found = self._regex.match(path)
        return found.groupdict() if found else None

    def policy_for(self, dimensions: tuple[str, ...]) -> Policy:
        """The policy to hit; built once from the rule and the key's dimensions."""
        if self.policy is None:
            items = self._rule if isinstance(self._rule, (list, tuple)) else [self._rule]
            rules: list[Rule] = []
            for item in items:
                if isinstance(item, Rule):
                    rules.append(item)
                elif isinstance(item, str):
                    rules.extend(Rule(rate, by=dimensions) for rate in parse_rates(item))
                else:
                    raise ConfigError(f"Limit rule must be a rate string, Rule or Policy: {item!r}")
            self.policy = Policy(self.name, *rules)
        return self.policy


def find(
    limits: Sequence[Limit], request_method: str, path: str
) -> tuple[Limit, dict[str, str]] | None:
    for limit in limits:
        params = limit.match(request_method, path)
        if params is not None:
            return limit, params
    return None


def problem_body(decision: Decision, instance: str) -> bytes:
    """An RFC 9457 problem document for a denied request."""
    wait = whole_seconds(decision.retry_after)
    return _problem(
        429,
        "Too Many Requests",
        f"Rate limit exceeded; retry after {wait} seconds.",
        instance,
        violated_policies=[rule.id for rule in decision.denied_by],
        policy=decision.policy,
    )


def bad_request_body(error: BadRequest, instance: str) -> bytes:
    """An RFC 9457 problem document for a request that cannot be keyed."""
    return _problem(400, "Bad Request", str(error), instance)


def _problem(status: int, title: str, detail: str, instance: str, **extra: object) -> bytes:
    document = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return json.dumps({**document, "instance": instance, **extra}).encode()
