"""A smoke test of an installed freqguard (CI runs it from a clean venv holding only the
wheel, outside the checkout): the package is the installed one, its Lua script is in it,
and a guard decides."""

from __future__ import annotations

from importlib import resources
from importlib.metadata import version

import freqguard
from freqguard import Guard, ManualClock, Policy, Rule

assert "site-packages" in freqguard.__file__, f"not the installed package: {freqguard.__file__}"
lua = resources.files("freqguard.script").joinpath("policy.lua").read_text()
assert lua.startswith("#!lua"), "the wheel lacks the policy script"
assert resources.files("freqguard").joinpath("py.typed").is_file(), "the wheel lacks py.typed"
guard = Guard(policies=[Policy("p", Rule("1/minute", by="u"))], clock=ManualClock(0))
assert guard.hit("p", u="a").allowed
assert not guard.hit("p", u="a").allowed
print(f"freqguard {version('freqguard')} from the wheel: ok")
