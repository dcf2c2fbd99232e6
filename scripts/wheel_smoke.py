"""A smoke test of an installed freqguard (CI runs it from a clean venv holding only the
wheel, outside the checkout): the package is the installed one, every file of its Lua
library is in it, and the service's page, and a guard decides."""

from __future__ import annotations

from importlib import resources
from importlib.metadata import version

import freqguard
from freqguard import Guard, ManualClock, Policy, Rule
from freqguard.script import library

assert "site-packages" in freqguard.__file__, f"not the installed package: {freqguard.__file__}"
lua = library.function_library()  # reads every file of the library's manifest
assert lua.startswith("#!lua"), "the wheel lacks the policy library"
assert resources.files("freqguard").joinpath("py.typed").is_file(), "the wheel lacks py.typed"
page = resources.files("freqguard").joinpath("service").joinpath("page.html")
assert page.is_file(), "the wheel lacks the operator's page (service/page.html)"
guard = Guard(policies=[Policy("p", Rule("1/minute", by="u"))], clock=ManualClock(0))
assert guard.hit("p", u="a").allowed
assert not guard.hit("p", u="a").allowed
print(f"freqguard {version('freqguard')} from the wheel: ok")
