"""The HTTP integrations take a configuration: Flask's ``FREQGUARD_CONFIG`` (a path or a
Config), and a Config where Starlette's middleware or FastAPI's dependency takes a guard."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import Depends, FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import ConfigError, Guard
from freqguard.config import ENV, loads
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, limit_dependency

CONFIG = """\
prefix = "web"

[[policy]]
name = "api"
rules = [{ rate = "2/minute", by = "client", name = "per-client" }]
"""


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def test_flask_makes_its_guard_from_freqguard_config(tmp_path: Path) -> None:
    path = tmp_path / "freqguard.toml"
    path.write_text(CONFIG)
    app = Flask(__name__)
    app.config["FREQGUARD_CONFIG"] = str(path)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute"
    FreqGuard(app)

    @app.get("/")
    def index() -> str:
        return "ok"

    guard = app.extensions["freqguard"].guard
    assert isinstance(guard, Guard)
    assert guard.prefix == "web"
    assert "api" in guard.policies
    client = app.test_client()
    assert [client.get("/").status_code for _ in range(3)] == [200, 200, 429]


def test_flask_refuses_a_config_with_a_backend_or_a_guard(tmp_path: Path) -> None:
    config = loads(CONFIG)
    app = Flask(__name__)
    app.config.update(FREQGUARD_CONFIG=config, FREQGUARD_BACKEND="memory://")
    with pytest.raises(ConfigError, match="FREQGUARD_CONFIG names the backend"):
        FreqGuard(app)
    other = Flask(__name__)
    other.config["FREQGUARD_CONFIG"] = config
    with pytest.raises(ConfigError, match="FREQGUARD_CONFIG makes the guard"):
        FreqGuard(other, guard=Guard())
    broken = Flask(__name__)
    broken.config["FREQGUARD_CONFIG"] = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=r"absent\.toml: cannot be read"):
        FreqGuard(broken)


async def _codes(app: object, method: str, times: int) -> list[int]:
    transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return [(await http.request(method, "/")).status_code for _ in range(times)]


def test_starlette_middleware_takes_a_config() -> None:
    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = FreqGuardMiddleware(
        Starlette(routes=[Route("/", home)]),
        guard=loads(CONFIG),
        limits=[Limit("/", "2/minute")],
    )
    assert app.guard.prefix == "web"
    assert "api" in app.guard.policies
    assert asyncio.run(_codes(app, "GET", 3)) == [200, 200, 429]


def test_a_fastapi_dependency_takes_a_config() -> None:
    api = FastAPI()
    limited = limit_dependency(loads(CONFIG), "1/minute", name="login")

    @api.post("/", dependencies=[Depends(limited)])
    async def login() -> dict[str, str]:
        return {"ok": "yes"}

    assert asyncio.run(_codes(api, "POST", 2)) == [200, 429]
