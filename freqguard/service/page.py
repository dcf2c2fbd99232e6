"""The operator's page the decision service serves at ``/``: the policies and their rules,
live decisions and denials per policy and rule (from the service's metrics), a chart of
each policy's decisions per minute over the last hour (every worker's, refreshed every
five seconds from ``/v1/stats/history``), the keys denied most (digests unless the
token is typed in), and a lookup of
one context (its use per rule, its per-key limits, when it frees). One HTML document with
its script inline: no asset, no CDN. A lookup asks the ``/v1`` endpoints; the one write,
a per-key limit set or cleared, is the API's own ``PUT``/``DELETE`` call (JSON, this
origin), each with the token typed into the page when the service requires one."""

from __future__ import annotations

from importlib import resources

__all__ = ["PAGE"]

#: The page, from ``page.html`` beside this module (HTML, its style and script inline).
PAGE = resources.files("freqguard.service").joinpath("page.html").read_text(encoding="utf-8")
