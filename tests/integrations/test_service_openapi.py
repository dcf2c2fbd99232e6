"""The service's OpenAPI document: every route the app serves, derived schemas the answers
match, and a client generated from it (openapi-python-client) that calls the real service."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.routing import Route

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app
from freqguard.service.openapi import document
from tests.conftest import flush
from tests.integrations.service_process import serving, sms_config
from tests.servers import RedisServer

METHODS = {"get", "put", "post", "delete", "patch"}
SMS = Policy("sms", Rule("2/minute", by="recipient", name="rcpt-1m"))


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def test_the_document_lists_every_route_the_app_serves_and_no_other() -> None:
    app = create_app(AsyncGuard(MemoryBackend(), [SMS]))
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"  # Starlette adds HEAD to every GET
    }
    documented = {(path, method) for path, method, _ in _operations(document())}
    assert served == documented


def test_every_operation_has_an_id_and_documents_its_problems() -> None:
    doc = document()
    ids = [operation["operationId"] for _, _, operation in _operations(doc)]
    assert len(ids) == len(set(ids)) == 18
    problem = {"schema": {"$ref": "#/components/schemas/Problem"}}
    for path, _, operation in _operations(doc):
        statuses = {"405"} | ({"401", "404"} if path.startswith("/v1/policies/") else set())
        for status in statuses:
            assert operation["responses"][status]["content"] == {
                "application/problem+json": problem
            }, (path, status)


def test_the_headers_a_problem_carries_are_declared() -> None:
    """An operator's first hour: the document declared no response header, so a client
    generated from it could not see Retry-After (503: when to come back),
    WWW-Authenticate (401) or Allow (405)."""
    doc = document()
    expected = {"401": "WWW-Authenticate", "405": "Allow", "503": "Retry-After"}
    for path, _, operation in _operations(doc):
        for status, header in expected.items():
            answer = operation["responses"].get(status)
            if answer is not None:
                assert answer["headers"][header]["schema"]["type"] in ("string", "integer"), (
                    path,
                    status,
                )


def test_the_policy_is_a_plain_string_and_the_schemas_are_shared_components() -> None:
    doc = document()
    for path, item in doc["paths"].items():
        for parameter in item.get("parameters", ()):
            assert parameter["schema"] == {"type": "string"}, path
    schemas = doc["components"]["schemas"]
    assert {"Decision", "RuleState", "Decisions", "Problem", "Limits", "Ready"} <= set(schemas)
    hit = doc["paths"]["/v1/policies/{policy}/hit"]["post"]
    assert hit["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Decision"
    }
    assert json.loads(json.dumps(doc)) == doc  # plain JSON all through


def _validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(root)


def test_the_answers_match_their_schemas() -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000))
    app = create_app(guard)
    ctx = {"context": {"recipient": "a"}}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            base = "/v1/policies/sms"
            return [
                await http.post(f"{base}/hit", json=ctx),
                await http.post(f"{base}/hit-many", json={"contexts": [ctx["context"]] * 3}),
                await http.post(f"{base}/limits", json=ctx),
                await http.post(f"{base}/reset", json=ctx),
                await http.post(f"{base}/hit", json={"context": {}}),
                await http.get("/healthz"),
                await http.get("/readyz"),
                await http.get("/v1/policies"),
                await http.get("/v1/stats"),
            ]

    answers = asyncio.run(run())
    doc = document()
    names = ["Decision", "Decisions", "Limits", "ResetDone", "Problem", "Health", "Ready"]
    names += ["PolicyList", "Stats"]
    for answer, name in zip(answers, names, strict=True):
        _validator(doc, name).validate(answer.json())
    assert answers[4].status_code == 422


# -- a generated client, against the real service -------------------------------------------

GENERATOR = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
PATH = os.environ.get("PATH", "")


@pytest.fixture
def client_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The package openapi-python-client generates from the document, imported."""
    if GENERATOR is None:
        pytest.skip("openapi-python-client is not installed (the dev extra installs it)")
    source = tmp_path / "openapi.json"
    source.write_text(json.dumps(document()))
    made = subprocess.run(
        [
            GENERATOR,
            "generate",
            "--path",
            str(source),
            "--output-path",
            str(tmp_path / "fgc"),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        # its post-hooks run ruff: this venv's, found without the venv activated
        env={**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), PATH])},
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Warning" not in made.stdout + made.stderr, made.stdout + made.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("fgc")
    for name in [m for m in sys.modules if m == "fgc" or m.startswith("fgc.")]:
        del sys.modules[name]


@pytest.mark.slow  # a client generated and run against a real freqguard serve
def test_a_generated_client_calls_the_real_service(
    client_package: Any, tmp_path: Path, redis_server: RedisServer
) -> None:
    flush([redis_server])
    hit = importlib.import_module("fgc.api.default.hit")
    hit_many = importlib.import_module("fgc.api.default.hit_many")
    readyz = importlib.import_module("fgc.api.default.readyz")
    models = importlib.import_module("fgc.models")
    tokens = tmp_path / "tokens"
    tokens.write_text("t0ken\n")
    config = sms_config(tmp_path, redis_server.port)
    with serving(config, "--token-file", str(tokens)) as service:
        authed = client_package.AuthenticatedClient(base_url=service.url, token="t0ken")
        with authed as client:
            context = models.CostedCallContext.from_dict({"recipient": "gen", "content": "x"})
            answers = [hit.sync(policy="sms", client=client, body=models.CostedCall(context))]
            answers += [hit.sync(policy="sms", client=client, body=models.CostedCall(context))]
            many = models.ManyCall.from_dict(
                {"contexts": [{"recipient": "gen", "content": "y"}] * 2}
            )
            batch = hit_many.sync(policy="sms", client=client, body=many)
            ready = readyz.sync(client=client)
            missing = hit.sync(policy="nope", client=client, body=models.CostedCall(context))
        anonymous = client_package.Client(base_url=service.url)
        with anonymous as client:
            refused = hit.sync(policy="sms", client=client, body=models.CostedCall(context))
    assert [type(a).__name__ for a in answers] == ["Decision", "Decision"]
    assert [a.allowed for a in answers] == [True, True]
    assert [d.allowed for d in batch.decisions] == [True, False]  # 3 a minute a recipient
    assert ready.status == "ready"
    assert (type(missing).__name__, missing.status) == ("Problem", 404)
    assert (type(refused).__name__, refused.status) == ("Problem", 401)
