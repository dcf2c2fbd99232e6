"""The rates a freqguard DRF throttle decides: where they are given (its own ``rate``, else
its scope's in ``DEFAULT_THROTTLE_RATES``: :func:`given`), parsed as DRF and freqguard write
them (:func:`drf_rates`), and the rules they make on the throttle's ``strategy``
(:func:`rules_of`): the sliding log, exact, unless it names another, as a rate past the
log's 10,000 needs. :func:`unheld` finds, before a request, a rate a view's throttle reads
and its strategy cannot hold (``freqguard.E003``: every request to the view would fail).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import NamedTuple

from freqguard.errors import ConfigError
from freqguard.integrations._drf_walk import Use, dotted
from freqguard.integrations._rule_items import check_cost
from freqguard.rates import Rate, parse_rates
from freqguard.rules import Rule
from freqguard.strategy import Strategy

__all__ = ["DRF", "Given", "drf_rates", "given", "parsed", "rules_of", "unheld"]

DRF = "freqguard.integrations.drf"  # the module of freqguard's own throttles


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


@functools.lru_cache(maxsize=256)  # read at every request: parsed once a text
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
        raise ConfigError(f"{where} must be a rate ('100/hour') or None, got {text!r}")
    try:
        return drf_rates(text)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


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
        else f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][{where.scope!r}]"
    )
    read = f"{at} = {where.text!r}, read by {dotted(use.throttle)}"
    try:
        rules_of(rates, getattr(use.throttle, "strategy", None), use.throttle, read)
        cost = inspect.getattr_static(use.throttle, "cost", 1)  # a property: the request's
        if isinstance(cost, int):  # a cost past the rate's capacity: every request refused
            check_cost(cost, rates, f"{read}: {dotted(use.throttle)}.")
    except ConfigError as error:
        return str(error)
    return None
