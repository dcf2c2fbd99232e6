"""The operator's page the decision service serves at ``/``: the policies, their decisions
and denials, each policy's decisions per minute, the keys denied most, and a lookup of one
context. One HTML document, its script inline (no asset, no CDN), that calls the API as
any client does (JSON, this origin, the token typed into the page when one is needed)."""

from __future__ import annotations

from importlib import resources

__all__ = ["PAGE"]

#: The page, from ``page.html`` beside this module (HTML, its style and script inline).
PAGE = resources.files("freqguard.service").joinpath("page.html").read_text(encoding="utf-8")
