"""Time zone names: only an IANA zone the machine's zone database holds is one. Every other
value (a folder of the database, a path, a file that is not a zone, the machine's own
``localtime``, a case variant, a non-string) is a ``ConfigError`` naming it and what is
allowed: where a rule or quiet hours are made (``tz=``), in a configuration file (exit 2
from ``freqguard check``), at a hit (``tz_from``: naming the context value; from the
service: 422, the field ``context``), and nothing is counted."""

from __future__ import annotations

import asyncio
import zoneinfo
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
)
from freqguard.cli import main
from freqguard.clock import zone_named
from freqguard.errors import ContextError
from freqguard.service import create_app
from tests.conftest import examples

KNOWN = zoneinfo.available_timezones() - {"localtime"}
HOSTILE = [
    "America",  # a folder of the zone database
    "Etc",
    "America/Argentina",
    "..",
    "../../etc/passwd",
    "America/../Europe/Berlin",
    "/etc/localtime",
    "/usr/share/zoneinfo/UTC",
    "Europe/Berlin\x00",
    "UTC\x00.tab",
    "",
    " ",
    "Europe/Berlin ",
    "x" * 65,
    "Europe/" + "B" * 10_000,
    "zone.tab",  # files in the database that are not zones
    "tzdata.zi",
    "leapseconds",
    "iso3166.tab",
    "__init__.py",
    "zones",
    "localtime",  # the machine's own zone: differs by machine
    "posixrules",
    "right/UTC",  # leap-second variants: clocks 27 s off
    "posix/Europe/Berlin",
    "europe/berlin",  # case variants
    "EUROPE/BERLIN",
    "utc",
    "America/",
    "America//New_York",
    "./UTC",
    "Mars/Olympus",
]
NOT_STRINGS: list[object] = [None, 0, 3.5, b"UTC", ["UTC"], {"tz": "UTC"}, object()]


def _assert_refused(make: Any, name: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        make(name)
    message = str(caught.value)
    assert "IANA name" in message, message
    assert "Europe/Berlin" in message or "did you mean" in message, message
    if isinstance(name, str) and len(name) <= 64:
        assert repr(name) in message, message
    assert len(message) < 400, message  # a huge value is not echoed whole
    return caught.value


MAKERS: dict[str, Any] = {
    "zone_named": zone_named,
    "Rule": lambda tz: Rule("3/day", by="r", calendar=True, tz=tz),
    "QuietHours": lambda tz: QuietHours("21:00", "08:00", tz=tz),
}


@pytest.mark.parametrize(
    ("maker", "name"),
    [
        (maker, name)
        for maker in sorted(MAKERS)
        for name in HOSTILE + NOT_STRINGS
        if name is not None or maker == "zone_named"  # tz=None: no zone, refused apart
    ],
    ids=lambda v: "object" if type(v) is object else repr(v)[:40],  # the same in every worker
)
def test_a_bad_zone_is_refused_where_it_is_written(maker: str, name: object) -> None:
    _assert_refused(MAKERS[maker], name)


def test_the_message_says_what_was_meant() -> None:
    assert "did you mean 'Europe/Berlin'" in str(_assert_refused(zone_named, "europe/berlin"))
    region = str(_assert_refused(zone_named, "America"))
    assert "region" in region
    assert "'America/" in region  # one of its zones, for example


def _guard() -> Guard:
    policy = Policy(
        "sms",
        Rule("2/day", by="r", name="day", calendar=True, tz_from="tz"),
        quiet=QuietHours("21:00", "08:00", tz_from="zone"),
    )
    return Guard(MemoryBackend(), [policy], clock=ManualClock(1_781_200_000))


@pytest.mark.parametrize("name", HOSTILE, ids=lambda v: repr(v)[:40])
def test_a_bad_zone_at_a_hit_names_the_context_value_and_counts_nothing(name: str) -> None:
    guard = _guard()
    contexts: list[tuple[str, dict[str, Any]]] = [
        ("tz", {"tz": name, "zone": "UTC"}),
        ("zone", {"tz": "UTC", "zone": name}),
    ]
    for read, ctx in contexts:
        with pytest.raises(ContextError) as caught:
            guard.hit("sms", r="a", **ctx)
        # "context value 'tz'", or for an empty one "the zone the hit names as 'tz'"
        assert f"{read!r}" in str(caught.value)
        assert "IANA name" in str(caught.value)
    good: dict[str, Any] = {"tz": "Europe/Berlin", "zone": "Europe/Berlin"}
    assert [guard.hit("sms", r="a", **good).allowed for _ in range(3)] == [True, True, False]


# names near real ones: their folders, files beside them, paths through them, other cases
near = st.sampled_from(sorted(KNOWN)).flatmap(
    lambda zone: st.sampled_from(
        [
            zone.rsplit("/", 1)[0],
            zone.swapcase(),
            zone.lower(),
            zone + "/",
            "/" + zone,
            "../" + zone,
            zone + "\x00",
            zone.replace("/", "/../"),
            zone + ".tab",
            "posix/" + zone,
            "right/" + zone,
        ]
    )
)
hostile = st.one_of(
    near,
    st.text(max_size=80),
    st.text(alphabet="./\\\x00 aA_-+0~", max_size=30),
    st.sampled_from(HOSTILE),
    st.integers() | st.binary(max_size=20) | st.none() | st.lists(st.text(max_size=5)),
)


@settings(max_examples=examples(100))
@given(name=hostile)
def test_any_name_is_a_zone_of_the_database_or_a_clear_error(name: object) -> None:
    """Whatever the name, a zone the database lists under exactly that name or a
    ConfigError; never another exception."""
    if isinstance(name, str) and name in KNOWN:
        assert zone_named(name).key == name
        return
    _assert_refused(zone_named, name)


@settings(max_examples=examples(50))
@given(name=hostile.filter(lambda n: isinstance(n, str) and n not in KNOWN))
def test_any_bad_name_at_a_hit_is_a_context_error(name: str) -> None:
    guard = _guard()
    with pytest.raises(ContextError, match=r"'tz'.*IANA name"):
        guard.hit("sms", r="a", tz=name, zone="UTC")
    assert guard.peek("sms", r="a", tz="UTC", zone="UTC").remaining == 2


@pytest.mark.parametrize("name", ["America", "../../etc/passwd", "localtime", "europe/berlin"])
def test_the_service_answers_422_naming_the_value(name: str) -> None:
    policy = Policy("sms", Rule("2/day", by="r", calendar=True, tz_from="tz"))
    app = create_app(AsyncGuard(MemoryBackend(), [policy], clock=ManualClock(1_781_200_000)))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            body = {"context": {"r": "a", "tz": name}}
            return await http.post("/v1/policies/sms/hit", json=body)

    response = asyncio.run(run())
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "context.tz"
    assert f"context value 'tz': unknown time zone {name!r}" in response.json()["detail"]


@pytest.mark.parametrize("where", ["rule", "quiet"])
@pytest.mark.parametrize("name", ["America", "Etc", "zone.tab", "localtime", "right/UTC"])
def test_check_exits_2_naming_the_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, name: str
) -> None:
    rule = '{ rate = "3/day", by = "r", calendar = true, tz = "%s" }' % (
        name if where == "rule" else "UTC"
    )
    quiet = f'quiet = {{ start = "21:00", end = "08:00", tz = "{name}" }}'
    path = tmp_path / "freqguard.toml"
    path.write_text(
        f'backend = "memory://"\n\n[[policy]]\nname = "sms"\nrules = [{rule}]\n'
        + (quiet if where == "quiet" else "")
    )
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert repr(name) in err
    assert "IANA name" in err
