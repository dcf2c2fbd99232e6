"""Rate-limit response headers, in one place.

Profiles:

* ``"ietf"``: draft-ietf-httpapi-ratelimit-headers-10. ``RateLimit-Policy`` lists every
  enforcing rule as a Structured Fields item, ``"<rule>";q=<limit>;w=<window s>``, and
  ``RateLimit`` names the one nearest exhaustion, ``"<rule>";r=<remaining>;t=<seconds>``.
* ``"draft6"``: ``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset``.
* ``"x-ratelimit"``: ``X-RateLimit-Limit``, ``X-RateLimit-Remaining``, ``X-RateLimit-Reset``.
* ``"none"``: nothing.

The binding rule (the one ``RateLimit`` names, and whose numbers every profile shows) is the
Decision's own: :func:`binding_rule`, as ``decision.remaining``,
``decision.capacity`` and ``decision.reset_after`` report it.

Seconds are whole, rounded up. ``t`` (and the reset headers) is when the binding rule admits
again: for a denied hit, when that hit would fit (``retry_after``); for an allowed one, when
the rule is back to full capacity. A denial also gets ``Retry-After``, never earlier than
``t``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from freqguard.errors import ConfigError, shown
from freqguard.rules import Rule

if TYPE_CHECKING:
    from freqguard.decision import Decision

__all__ = [
    "PROFILES",
    "HeaderPlan",
    "HeaderProfile",
    "binding_rule",
    "check_profile",
    "combined_headers",
    "header_plan",
    "merge_into",
    "merged",
    "rate_limit_headers",
    "whole_seconds",
]

HeaderProfile = Literal["ietf", "draft6", "x-ratelimit", "none"]
PROFILES: tuple[str, ...] = ("ietf", "draft6", "x-ratelimit", "none")

_US = 1_000_000.0


def whole_seconds(value: float) -> int:
    return max(0, math.ceil(value - 1e-9))  # whole seconds, rounded up (float noise aside)


def _sf_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_profile(profile: str, given: str = "headers") -> str:
    """Validate a header profile name (``given``: the argument or setting it came from)."""
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ConfigError(
            f"{given}: unknown header profile {shown(profile)}; allowed: {', '.join(PROFILES)}"
        )
    return profile


def rate_limit_headers(decision: Decision, profile: str = "ietf") -> dict[str, str]:
    """The response headers for ``decision`` in the given profile.

    Raises:
        ConfigError: for an unknown profile.
    """
    rules = tuple(entry[0] for entry in decision.raw)
    return header_plan(rules, check_profile(profile)).fields(decision)


def combined_headers(decisions: Sequence[Decision], profile: str = "ietf") -> dict[str, str]:
    """The headers of one response whose request met several decisions (a view's default
    limits and a throttle's, say): ``RateLimit-Policy`` lists every enforcing rule of them
    all (once each), and the other headers are those of the decision whose rule is nearest
    exhaustion (:func:`binding_rule` over all of them: a denial first).

    Raises:
        ConfigError: for an unknown profile.
    """
    entries = [entry for decision in decisions for entry in decision.raw]
    denied = [decision for decision in decisions if not decision.allowed]
    if denied:  # the refusal's own (quiet hours: their numbers are another rule's)
        tightest = max(denied, key=lambda decision: decision.retry_after)
    else:
        rule = binding_rule(entries)[0]
        tightest = next(d for d in decisions if any(entry[0] is rule for entry in d.raw))
    fields = rate_limit_headers(tightest, profile)
    if "RateLimit-Policy" in fields:
        rules = {id(entry[0]): entry[0] for entry in entries}  # in order, each once
        fields["RateLimit-Policy"] = _policy_field(list(rules.values()))
    return fields


class HeaderPlan:
    """One policy's headers in one profile, with everything that does not depend on the
    decision built once: the names, ``RateLimit-Policy`` and each rule's quoted name.

    Headers are made as the byte pairs ASGI servers send (:meth:`raw`: lower-case names,
    latin-1 values); the text form (:meth:`fields`) is decoded from them. Build it with
    :func:`header_plan`.
    """

    __slots__ = ("_fixed", "_names", "_profile", "_quoted", "_rules", "_text")

    def __init__(self, rules: Sequence[Rule], profile: str) -> None:
        self._profile = check_profile(profile)
        self._rules = tuple(rules)
        self._quoted = {rule.id: _latin1(_sf_string(rule.id)) for rule in rules}
        fixed: dict[str, str] = {}
        names: tuple[str, ...] = ()
        if profile == "ietf":
            fixed["RateLimit-Policy"] = _policy_field(rules)
            names = ("RateLimit",)
        elif profile != "none":
            prefix = "RateLimit" if profile == "draft6" else "X-RateLimit"
            names = (f"{prefix}-Limit", f"{prefix}-Remaining", f"{prefix}-Reset")
        names += ("Retry-After",)  # with a denial only
        self._fixed = [(_latin1(name.lower()), _latin1(value)) for name, value in fixed.items()]
        self._names = tuple(_latin1(name.lower()) for name in names)
        # each header's name as written in the text form
        self._text = {_latin1(name.lower()): name for name in (*fixed, *names)}

    def _made(self, decision: Decision) -> list[tuple[bytes, bytes]]:
        """The headers that depend on the decision."""
        if self._profile == "none":
            return []
        # the rule the decision itself reports (one definition: binding_rule), so that
        # ``r`` is always ``decision.remaining`` and ``t`` its ``reset_after``
        rule, remaining, reset, _ = binding_rule(decision.raw)
        allowed = decision.allowed
        wait = whole_seconds(reset / _US if allowed else decision.retry_after)
        names = self._names
        if self._profile == "ietf":
            quoted = self._quoted.get(rule.id) or _latin1(_sf_string(rule.id))
            made = [(names[0], b"%b;r=%d;t=%d" % (quoted, remaining, wait))]
        else:
            made = [
                (names[0], b"%d" % rule.capacity),
                (names[1], b"%d" % remaining),
                (names[2], b"%d" % wait),
            ]
        if not allowed:
            made.append((names[-1], b"%d" % wait))
        return made

    def raw(self, decision: Decision) -> list[tuple[bytes, bytes]]:
        """The headers for ``decision`` as ASGI sends them: lower-case names, latin-1. A
        decision made under a per-key limit or a tier has its own ``RateLimit-Policy``."""
        raw = decision.raw
        for entry, rule in zip(raw, self._rules):  # noqa: B905 (one policy's rules)
            if entry[0] is not rule:
                made = header_plan(tuple(e[0] for e in raw), self._profile)
                return made._fixed + made._made(decision)
        return self._fixed + self._made(decision)

    def fields(self, decision: Decision) -> dict[str, str]:
        """The headers for ``decision``, by name."""
        text = self._text
        return {text[name]: value.decode("latin-1") for name, value in self.raw(decision)}


@functools.lru_cache(maxsize=1024)
def header_plan(rules: tuple[Rule, ...], profile: str) -> HeaderPlan:
    """The :class:`HeaderPlan` of a policy's rules (in policy order), built once per policy."""
    return HeaderPlan(rules, profile)


def _latin1(text: str) -> bytes:
    return text.encode("latin-1")


def _policy_field(rules: Sequence[Rule]) -> str:
    """``RateLimit-Policy`` depends only on the rules (not the quiet hours' pseudo-rule,
    whose rate is no one's: a client would read a quota of a billion)."""
    return ", ".join(
        f"{_sf_string(r.id)};q={r.limit};w={whole_seconds(r.rate.window_seconds)}"
        for r in rules
        if not r.shadow and r.quiet is None
    )


def binding_rule(
    raw: Sequence[tuple[Rule, int, int, int]],
) -> tuple[Rule, int, int, int]:
    """The rule whose numbers a decision shows (of its rules' ``(rule, remaining, reset µs,
    retry µs)``, as ``Decision.raw`` holds them): among the non-shadow rules, the denying one
    that frees up last (the first of equals), else the one with the least remaining (the
    later reset of equals). A policy of shadow rules only never denies: the least remaining
    of all, with no retry. Quiet hours that deny are shown by the policy's narrowest rule,
    none left until they end (their pseudo-rule's rate is no one's)."""
    binding = None
    for entry in raw:
        rule, remaining, reset, retry = entry
        if rule.shadow or (rule.quiet is not None and not retry):  # no count: no numbers
            continue
        if retry:
            if binding is None or not binding[3] or retry > binding[3]:
                binding = entry
        elif binding is None or (
            not binding[3]
            and (remaining < binding[1] or (remaining == binding[1] and reset > binding[2]))
        ):
            binding = entry
    if binding is not None and binding[0].quiet is None:  # the usual case: no list made
        return binding
    counted = [e for e in raw if e[0].quiet is None] or list(raw)  # a policy has a rule
    if binding is None:
        least = min(counted, key=lambda e: (e[1], -e[2]))
        binding = (least[0], least[1], least[2], 0)
    else:  # quiet hours deny: shown by the narrowest real rule
        others = [e for e in counted if not e[0].shadow] or counted
        narrowest = min(others, key=lambda e: (e[1], -e[2]))[0]
        binding = (narrowest, 0, binding[2], binding[3])
    return binding


_REMAINING = ("x-ratelimit-remaining", "ratelimit-remaining")
#: every profile's header names, as text and as bytes (lower case)
_NAMES: frozenset[str | bytes] = frozenset(
    form
    for name in (
        "ratelimit",
        "ratelimit-policy",
        *(f"{p}ratelimit-{n}" for p in ("", "x-") for n in ("limit", "remaining", "reset")),
        "retry-after",
    )
    for form in (name, name.encode())
)
_R = re.compile(r";\s*r=([0-9]+)")
#: a Structured Fields List's items (a quoted string may hold a comma)
_ITEM = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^,"])+')
_HUGE = 10**18  # a remaining of more digits is as far from exhaustion as any


#: a header as ASGI (bytes) or WSGI (text) gives it
Header = TypeVar("Header", tuple[bytes, bytes], tuple[str, str])


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _family(name: str) -> str:
    """A lower-case rate-limit header name's profile, the names one set of numbers is told
    by (``Retry-After`` its own; ``RateLimit-Policy``, which tells no numbers, too)."""
    if name.startswith("x-ratelimit-"):
        return "x-ratelimit"
    if name == "ratelimit":
        return "ietf"
    if name == "ratelimit-policy":
        return "policy"
    return "draft6" if name.startswith("ratelimit-") else name


def _number(text: str) -> int | None:
    text = text.strip()  # only ASCII digits: int() refuses "²", which isdigit() takes
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) < 19 else _HUGE


def _remaining(headers: Sequence[tuple[Any, Any]]) -> int | None:
    """The least remaining a set of rate-limit headers tells (any profile, every item of an
    IETF ``RateLimit`` list, every line of a repeated header), or None."""
    least: int | None = None
    for name, value in headers:
        key, text = _text(name).lower(), _text(value)
        found = [_number(text)] if key in _REMAINING else []
        if key == "ratelimit":
            found = [_number(r) for r in _R.findall(text)]
        for number in found:
            if number is not None and (least is None or number < least):
                least = number
    return least


def _policy(headers: list[Header]) -> list[Header]:
    """``headers`` with one ``RateLimit-Policy``: every rule of every line's (a List field:
    each limit the request met is a quota the client may read), once each."""
    policies = [h for h in headers if _text(h[0]).lower() == "ratelimit-policy"]
    if len(policies) < 2:
        return headers
    items: dict[str, None] = {}
    for header in policies:
        items.update((item.strip(), None) for item in _ITEM.findall(_text(header[1])))
    value = ", ".join(item for item in items if item)
    first = policies[0]
    joined = (first[0], value.encode("latin-1") if isinstance(first[0], bytes) else value)
    out = [h for h in headers if _text(h[0]).lower() != "ratelimit-policy"]
    out.append(joined)  # the same form as the headers'
    return out


def merged(
    given: Sequence[Header], ours: Sequence[Header], status: int | None = None
) -> list[Header]:
    """A response's ``given`` headers with a middleware's rate-limit headers, ``ours``: where
    the response sets a profile of theirs already (a route's own limit under the
    middleware's), one set of that profile's numbers, never two values of one header nor a
    mix of both sets: a denial's (the one with ``Retry-After``, as :func:`combined_headers`
    puts a denial first), else the one nearest exhaustion (fewer remaining; the response's
    own when as near, or when either tells none). One ``RateLimit-Policy`` lists both
    sides' rules, as :func:`combined_headers` lists every enforcing rule. ``status``, the
    response's: a ``Retry-After`` of one below 400 (a redirect's, a 202's time to poll) is
    no refusal of the response's, and the numbers decide."""
    out = list(given)
    for header in out:
        if header[0].lower() in _NAMES:
            break
    else:  # the usual answer: none of them set
        out.extend(ours)
        return out

    def family(header: Header) -> str:
        return _family(_text(header[0]).lower())

    families = {family(h) for h in ours} - {"policy"}
    own = [h for h in out if h[0].lower() in _NAMES and family(h) in families]
    theirs_refused = (status is None or status >= 400) and any(
        _text(h[0]).lower() == "retry-after" for h in out
    )
    ours_refused = any(_text(h[0]).lower() == "retry-after" for h in ours)
    if not own:
        ours_win = True  # nothing of theirs to keep instead
    elif ours_refused != theirs_refused:
        ours_win = ours_refused
    else:
        mine, theirs = _remaining(ours), _remaining(own)
        ours_win = mine is not None and theirs is not None and mine < theirs
    if ours_win:
        out = [h for h in out if not (h[0].lower() in _NAMES and family(h) in families)]
        out.extend(ours)
    else:
        shared = {family(h) for h in own}
        out.extend(h for h in ours if family(h) not in shared)
    return _policy(out)


class HeaderMap(Protocol):
    """A response's header map, werkzeug's or Django's: what :func:`merge_into` uses."""

    def items(self) -> Iterable[tuple[str, str]]: ...
    def __setitem__(self, name: str, value: str, /) -> None: ...
    def __delitem__(self, name: str, /) -> None: ...


def merge_into(headers: HeaderMap, ours: Mapping[str, str], status: int | None = None) -> None:
    """Set an extension's rate-limit headers, ``ours``, on a response's header map (Flask's,
    Django's) as :func:`merged` does on a list: one set of numbers a profile, the nearer
    exhaustion, the view's own when as near (``status``, the response's: see :func:`merged`).
    A header the result repeats is one line, its values joined as a list field."""
    given = list(headers.items())
    if not any(name.lower() in _NAMES for name, _ in given):
        for name, value in ours.items():  # the usual answer: the view set none of them
            headers[name] = value
        return
    values: dict[str, tuple[str, list[str]]] = {}
    for name, value in merged(given, list(ours.items()), status):
        if name.lower() in _NAMES:
            values.setdefault(name.lower(), (name, []))[1].append(value)
    for name in {name for name, _ in given if name.lower() in _NAMES}:
        del headers[name]
    for name, found in values.values():
        headers[name] = ", ".join(found)
