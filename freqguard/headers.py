"""Rate-limit response headers, in one place.

Profiles:

* ``"ietf"``: draft-ietf-httpapi-ratelimit-headers-10. ``RateLimit-Policy`` lists every
  enforcing rule as a Structured Fields item, ``"<rule>";q=<limit>;w=<window s>``, and
  ``RateLimit`` names the one nearest exhaustion, ``"<rule>";r=<remaining>;t=<seconds>``.
* ``"draft6"``: ``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset``.
* ``"x-ratelimit"``: ``X-RateLimit-Limit``, ``X-RateLimit-Remaining``, ``X-RateLimit-Reset``.
* ``"none"``: nothing.

The binding rule (the one ``RateLimit`` names, and whose numbers every profile shows) is the
Decision's own: :func:`freqguard.decision.binding_rule`, as ``decision.remaining``,
``decision.limit`` and ``decision.reset_after`` report it.

Seconds are whole, rounded up. ``t`` (and the reset headers) is when the binding rule admits
again: for a denied hit, when that hit would fit (``retry_after``); for an allowed one, when
the rule is back to full capacity. A denial also gets ``Retry-After``, never earlier than
``t``.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

from freqguard.decision import Decision, binding_rule
from freqguard.errors import ConfigError
from freqguard.rules import Rule

__all__ = ["PROFILES", "HeaderProfile", "check_profile", "rate_limit_headers", "whole_seconds"]

HeaderProfile = Literal["ietf", "draft6", "x-ratelimit", "none"]
PROFILES: tuple[str, ...] = ("ietf", "draft6", "x-ratelimit", "none")


def whole_seconds(value: float) -> int:
    return max(0, math.ceil(value - 1e-9))  # whole seconds, rounded up (float noise aside)


def _sf_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_profile(profile: str) -> str:
    """Validate a header profile name."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown header profile {profile!r}; allowed: {', '.join(PROFILES)}")
    return profile


def rate_limit_headers(decision: Decision, profile: str = "ietf") -> dict[str, str]:
    """The response headers for ``decision`` in the given profile.

    Raises:
        ConfigError: for an unknown profile.
    """
    if check_profile(profile) == "none":
        return {}
    wait = whole_seconds(decision.reset_after if decision.allowed else decision.retry_after)
    headers: dict[str, str] = {}
    if profile == "ietf":
        raw = decision.raw
        # the rule the decision itself reports (one definition: binding_rule), so
        # that ``r`` is always ``decision.remaining``
        binding = binding_rule(raw)[0]
        headers["RateLimit-Policy"] = _policy_field(tuple(entry[0] for entry in raw))
        headers["RateLimit"] = f"{_sf_string(binding.id)};r={decision.remaining};t={wait}"
    else:
        prefix = "RateLimit" if profile == "draft6" else "X-RateLimit"
        headers[f"{prefix}-Limit"] = str(decision.limit)
        headers[f"{prefix}-Remaining"] = str(decision.remaining)
        headers[f"{prefix}-Reset"] = str(wait)
    if not decision.allowed:
        headers["Retry-After"] = str(wait)
    return headers


@functools.lru_cache(maxsize=1024)
def _policy_field(rules: tuple[Rule, ...]) -> str:
    """``RateLimit-Policy`` depends only on the rules: built once per policy."""
    return ", ".join(
        f"{_sf_string(r.id)};q={r.limit};w={whole_seconds(r.rate.window_seconds)}"
        for r in rules
        if not r.shadow
    )
