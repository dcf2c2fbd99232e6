"""The rates a freqguard DRF throttle decides: where they are given (its own ``rate``, else
its scope's in ``DEFAULT_THROTTLE_RATES``: :func:`given`), parsed as DRF and freqguard write
them (:func:`drf_rates`), and the rules they make on the throttle's ``strategy``
(:func:`rules_of`): the sliding log, exact, unless it names another, as a rate past the
log's 10,000 needs. :func:`unheld` finds, before a request, a rate a view's throttle reads
and its strategy cannot hold (``freqguard.E003``: every request to the view would fail).

A throttle whose own code gives its rate (:func:`per_request`: a user's plan set in
``allow_request``, ``get_rate()``) has rules whose rate is the request's
(:func:`tiered`): each hit carries its rates in its context (:data:`READ`), which the rules
read as tiers (``Rule(..., rate_for=...)``), so its policy is registered once and every
request, whatever other plans decide at once, is decided at its own rates, on one budget.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import ClassVar, NamedTuple

from freqguard.errors import ConfigError, shown
from freqguard.integrations._drf_walk import Use, dotted
from freqguard.integrations._rule_items import check_cost
from freqguard.options import fit_name
from freqguard.rates import Rate, parse_rates
from freqguard.rules import Rule
from freqguard.strategy import Strategy

__all__ = [
    "DRF",
    "PER_REQUEST",
    "READ",
    "Given",
    "Nth",
    "coded",
    "drf_rates",
    "given",
    "grown",
    "own_rates",
    "parsed",
    "per_request",
    "rate_text",
    "rules_of",
    "tiered",
    "unheld",
]

DRF = "freqguard.integrations.drf"  # the module of freqguard's own throttles

#: The hit's context value that carries a per-request throttle's rates (:func:`rate_text`),
#: read by its rules (:class:`Nth`), never a key.
READ = "drf_rate"

#: Who gives a per-request throttle's rules (one source for all of a scope's: one budget).
PER_REQUEST = (
    "a throttle whose rate is the request's (its class's own allow_request, __init__, "
    "get_rate() or THROTTLE_RATES, a rate property, or a rate set on the instance)"
)

#: A per-request throttle's rules' own rate: every hit gives its rates, so it decides none
#: (a state keeps what its tier needs, and nothing longer: docs/django.md says so).
_OWN = parse_rates("1/second")[0]


class Given(NamedTuple):
    """Where a throttle's rate is given, and the text there."""

    scope: object  # None: the throttle's own ``rate``; else DEFAULT_THROTTLE_RATES[scope]
    text: object  # a rate; None under a scope: not throttled, as in DRF


def given(rate: object, scope: object, rates: object) -> Given | None:
    """Where a freqguard throttle reads its rate, as DRF's throttles do: its own ``rate``,
    else its scope's in ``rates`` (``DEFAULT_THROTTLE_RATES``); None: neither gives one
    (``FREQGUARD_DEFAULT_LIMITS`` serves then, if set)."""
    if rate is not None:
        return Given(None, rate)
    if scope is not None and isinstance(rates, Mapping) and scope in rates:
        return Given(scope, rates[scope])
    return None


@functools.lru_cache(maxsize=1024)  # read at every request: parsed once a text
def drf_rates(rate: str) -> tuple[Rate, ...]:
    """A rate as DRF writes it (``"100/h"``, ``"5/min"``), or as freqguard does
    (``"10/minute; 1000/day"``, ``"1/month"``): :func:`~freqguard.parse_rates`, which reads
    both. DRF reads a unit by its first letter (``"1/month"`` is 1 a minute there); here a
    month is a month, and a unit it does not know is an error.

    Raises:
        ConfigError: a rate that does not parse.
    """
    return parse_rates(rate)


def parsed(text: object, where: str) -> tuple[Rate, ...]:
    """``text`` parsed, an error naming ``where`` it was given."""
    if not isinstance(text, str):
        raise ConfigError(f"{where} must be a rate ('100/hour') or None, got {shown(text)}")
    try:
        return drf_rates(text)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


@functools.lru_cache(maxsize=256)  # a rate per request is checked at every request
def rules_of(
    rates: tuple[Rate, ...], strategy: Strategy | str | None, throttle: type, where: str
) -> tuple[Rate | Rule, ...]:
    """``rates`` (given at ``where``) as ``throttle``'s rules: on the sliding log
    (``strategy`` None), the rates themselves; else Rules of that strategy (keyed, as rates
    are, by the throttle's key).

    Raises:
        ConfigError: an unknown strategy, or a rate it cannot hold (a sliding log's past
            10,000), naming the throttle's ``strategy`` to set.
    """
    try:
        chosen = Strategy.SLIDING_LOG if strategy is None else Strategy.parse(strategy)
        made = [Rule(rate, strategy=chosen) for rate in rates]
    except ConfigError as error:
        name = throttle.__name__
        fix = (
            f"a subclass of {name} with strategy"
            if throttle.__module__ == DRF
            else f"{name}.strategy"
        )
        raise ConfigError(
            f"{where}: {error}; a DRF throttle's strategy is its class's: {fix} = 'rolling-window'"
        ) from None
    return rates if strategy is None else tuple(made)


def unheld(use: Use, where: Given) -> str | None:
    """The error for a rate a view's throttle reads (at ``where``) that its strategy cannot
    hold (None: it holds it, or it does not parse: :func:`parsed` says so elsewhere)."""
    try:
        rates = drf_rates(where.text) if isinstance(where.text, str) else ()
    except ConfigError:
        return None
    at = (
        f"{dotted(use.throttle)}.rate"
        if where.scope is None
        else f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][{shown(where.scope)}]"
    )
    read = f"{at} = {shown(where.text)}, read by {dotted(use.throttle)}"
    try:
        rules_of(rates, getattr(use.throttle, "strategy", None), use.throttle, read)
        cost = inspect.getattr_static(use.throttle, "cost", 1)  # a property: the request's
        if isinstance(cost, int):  # a cost past the rate's capacity: every request refused
            check_cost(cost, rates, f"{read}: {dotted(use.throttle)}.")
    except ConfigError as error:
        return str(error)
    return None


def own_rates(throttle: type) -> bool:
    """Whether the throttle has its own ``get_rate()`` or ``THROTTLE_RATES``, which give its
    rate when its ``rate`` is not set (read first, as DRF does)."""
    return getattr(throttle, "get_rate", None) is not None or bool(
        getattr(throttle, "THROTTLE_RATES", None)
    )


def coded(throttle: type) -> bool:
    """Whether the throttle's own code may give its rate or choose its scope at the
    request: its ``__init__``, ``allow_request`` or ``get_rate`` not freqguard's, or a
    ``THROTTLE_RATES`` of its own (the checks cannot run it, so do not judge it)."""
    if own_rates(throttle):
        return True
    for name in ("__init__", "allow_request"):
        owner = next((base for base in throttle.__mro__ if name in vars(base)), object)
        if owner.__module__ != DRF:
            return True
    return False


def per_request(throttle: type) -> bool:
    """Whether the throttle's rate may be another at each request: its own code gives it
    (:func:`coded`), or its ``rate`` is a property."""
    return coded(throttle) or hasattr(inspect.getattr_static(throttle, "rate", None), "__get__")


@functools.lru_cache(maxsize=1024)
def rate_text(rates: tuple[Rate, ...]) -> str:
    """``rates`` as the text a hit carries (:data:`READ`), which :func:`drf_rates` reads."""
    return "; ".join(map(str, rates))


@dataclasses.dataclass(frozen=True)
class Nth:
    """The ``rate_for`` of a per-request throttle's rule ``index``: that rate of the hit's
    (its last, while a throttle whose number of rates changed is registered anew). Equal
    by ``index``: two throttles of one scope make one policy. A state keeps what the rate
    in force needs, and remembers no longer one it met (``TRIMS``, ``engine/tiers.py``):
    a plan change trims the history as DRF's throttle does."""

    TRIMS: ClassVar[bool] = True

    index: int

    def __call__(self, texts: Mapping[str, str]) -> Rate | None:
        text = texts.get(READ)
        if text is None:  # a hit not from a throttle: the rule's own
            return None
        rates = drf_rates(text)
        return rates[min(self.index, len(rates) - 1)]


def tiered(count: int, strategy: str | None, label: str) -> tuple[Rule, ...]:
    """A per-request throttle's ``count`` rules (its rates checked by :func:`rules_of`),
    each reading its rate from the hit's context, named after ``label`` (its scope, or its
    class: ``label``, ``label.2``...), never after a rate: a state's key is one whatever
    the rate, and whatever the number of rates (the first rule's name is ``label`` alone)."""
    chosen = Strategy.SLIDING_LOG if strategy is None else Strategy.parse(strategy)
    names = [label, *(f"{label}.{n}" for n in range(2, count + 1))]
    return tuple(
        Rule(_OWN, strategy=chosen, name=fit_name(name), rate_for=Nth(index), reads=READ)
        for index, name in enumerate(names)
    )


def grown(rates: tuple[Rate, ...], strategy: str | None, last: object) -> int:
    """How many rules a per-request throttle's policy is registered with (on ``strategy``):
    the most rates a request of its scope has given so far (``last``, the mark of its
    latest registration, ``(count, strategy)``). A request of fewer rates is decided on it,
    its last rate read again by the rules past them, so plans of one rate and of two,
    alternating, do not register it again at each turn."""
    if isinstance(last, tuple) and last[1:] == (strategy,) and isinstance(last[0], int):
        return max(len(rates), last[0])
    return len(rates)
