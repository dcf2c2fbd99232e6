"""What a new user's first hour wrote, from the peers' habits, and what it met: each an error
naming the fix, or the habit taken (a new user's run from a clean clone, stop 55)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from tests.conftest import START


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def test_a_starlette_users_client_host_keys_a_limit() -> None:
    """Starlette's ``request.client.host`` in a ``Limit``'s key was an ``AttributeError``
    (a 500 at the first request): a key function's ``client`` is the address, a ``str``,
    and reads ``.host`` as Starlette's does."""
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    limit = Limit("/k", "1/minute", key=lambda request: {"ip": request.client.host})  # type: ignore[union-attr]
    app = FreqGuardMiddleware(Starlette(routes=[Route("/k", _ok)]), guard=guard, limits=[limit])

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [(await client.get("/k")).status_code for _ in range(2)]

    assert asyncio.run(main()) == [200, 429]


def test_a_policy_without_its_name_says_the_name_comes_first() -> None:
    with pytest.raises(ConfigError, match=r"Policy takes its name first: Policy\('sms', "):
        Policy(Rule("1/second"))  # type: ignore[arg-type]


def test_hit_given_a_rate_item_says_it_takes_a_policys_name() -> None:
    """limits' ``hit(item, "u")``: "unknown policy 10 per 1 minute" said nothing of what
    ``hit`` takes."""
    from limits import parse

    guard = Guard(policies=[Policy("api", Rule("10/minute", by="user"))])
    with pytest.raises(ConfigError, match=r"hit takes a policy's name.*registered: api"):
        guard.hit(parse("10/minute"), user="u")  # type: ignore[arg-type]


def test_a_dotted_path_rate_says_it_is_not_taken() -> None:
    """django-ratelimit's ``rate="myapp.rates.get"`` (a callable's dotted path)."""
    with pytest.raises(ConfigError, match=r"dotted path.*TierRates"):
        Rule("myapp.rates.get")


def test_limit_dependency_without_a_guard_names_it() -> None:
    from freqguard.integrations.fastapi import limit_dependency

    with pytest.raises(ConfigError, match=r"limit_dependency\(guard, '1/minute', name="):
        limit_dependency("1/minute")  # type: ignore[arg-type]


def test_the_middleware_without_a_guard_names_it() -> None:
    with pytest.raises(ConfigError, match=r"guard=AsyncGuard"):
        FreqGuardMiddleware(Starlette(), limits=[Limit("/k", "1/minute")])


def test_flask_limiters_request_filter_reads_as_a_sentence() -> None:
    pytest.importorskip("flask")
    from freqguard.integrations.flask import FreqGuard

    with pytest.raises(AttributeError) as refused:
        FreqGuard().request_filter  # type: ignore[attr-defined]  # noqa: B018
    assert "SkipRequest: the request is left uncapped" in str(refused.value)


def test_a_guard_given_limits_storage_names_freqguards_backends() -> None:
    from limits.storage import MemoryStorage

    with pytest.raises(TypeError, match=r"limits' storage.*MemoryBackend\(\)"):
        Guard(MemoryStorage())  # type: ignore[arg-type]


def test_a_rule_given_a_list_of_rates_names_one_rule_each() -> None:
    with pytest.raises(ConfigError, match=r"one Rule per rate"):
        Rule(["10/minute", "100/hour"])  # type: ignore[arg-type]


@pytest.mark.parametrize("face", [Guard, AsyncGuard])
@pytest.mark.parametrize(
    ("method", "named"),
    [
        ("test", r"peek\(policy, \*\*context\)\.allowed"),
        ("get_window_stats", r"\.remaining, and \.reset_after"),
        ("clear", r"reset\(policy"),
        ("limit", r"@capped"),
    ],
)
def test_a_peers_method_on_a_guard_names_freqguards_way(
    face: type[Guard] | type[AsyncGuard], method: str, named: str
) -> None:
    """limits' ``test()`` and ``get_window_stats()``, slowapi's ``limit()``: an
    AttributeError that says which call it is here; any other name, Python's own."""
    guard = face(MemoryBackend())
    with pytest.raises(AttributeError, match=rf"has no attribute '{method}': .*{named}"):
        getattr(guard, method)
    with pytest.raises(AttributeError, match=r"^'\w+' object has no attribute 'nope'$"):
        guard.nope  # type: ignore[union-attr]  # noqa: B018


def test_a_mistyped_policy_name_gets_the_one_meant() -> None:
    guard = Guard(MemoryBackend(), [Policy("api", Rule("1/second"))])
    with pytest.raises(ConfigError, match=r"unknown policy 'apii' \(did you mean 'api'\?"):
        guard.hit("apii")


def test_a_host_and_port_without_a_scheme_gets_the_url_to_write() -> None:
    from freqguard import backend_from_url

    with pytest.raises(ConfigError, match=r"redis://localhost:6379\)"):
        backend_from_url("localhost:6379")


_WITHOUT = """
import importlib, importlib.abc, importlib.machinery, sys

class Missing(importlib.abc.Loader):
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ModuleNotFoundError(f"No module named {module.__name__!r}", name=module.__name__)

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("flask", "celery", "starlette", "fastapi"):
            return importlib.machinery.ModuleSpec(name, Missing())
        return None

sys.meta_path.insert(0, Block())
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        print(type(exc).__name__, exc)
"""


def test_an_integration_without_its_extra_says_how_to_get_it() -> None:
    """Flask's, Starlette's and Celery's integrations raised a bare ModuleNotFoundError
    without their extra, where Django's, Redis's and YAML's name the install (a new user's
    run). Run in a process where those packages cannot be imported."""
    import subprocess
    import sys

    modules = ["flask", "celery", "fastapi", "starlette"]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT, *(f"freqguard.integrations.{m}" for m in modules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    said = done.stdout.strip().splitlines()
    extras = ["flask", "celery", "starlette", "starlette"]
    assert said == [
        f"ImportError freqguard.integrations.{module} needs {extra}, an optional extra: "
        f"pip install -e '.[{extra}]' in a checkout of freqguard (it is not on PyPI yet)"
        for module, extra in zip(modules, extras, strict=True)
    ]
