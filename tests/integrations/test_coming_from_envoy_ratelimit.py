"""docs/coming-from/envoy-ratelimit.md, row by row. Envoy's ratelimit service is not
installed here: ``Envoy`` below is its documented behaviour on the Redis cache (a
descriptor matched against the domain's config tree, a value before the key alone; a
counter per descriptor and window aligned to the epoch, every matched descriptor's
counter increased by ``max(1, hits_addend)`` before the limits are read; ``shadow_mode``
answering OK; ``unlimited`` counting nothing), and each row runs freqguard's translation
beside it on one pinned clock: the guard, or ``freqguard serve``'s app in process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml

from freqguard import ConfigError, Decision, Guard, ManualClock
from freqguard.config import loads
from freqguard.headers import rate_limit_headers
from freqguard.service import create_app
from tests.conftest import START

UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
Entries = tuple[tuple[str, str], ...]

#: an Envoy domain: a wildcard key, one value of it apart, a shadow limit, a nested path
ENVOY = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: generic_key
    value: reports
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: header_match
    value: bar
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 2}
"""

#: the same, translated: a policy per descriptor tree a caller asks about
OURS = """
policy:
  - name: edge
    rules:
      - rate: 3/minute
        by: remote_address
        strategy: fixed-window
        name: per-ip
        tiers: {from: remote_address, rates: {'50.0.0.5': 5/minute}}
  - name: reports
    rules:
      - {rate: 2/hour, strategy: fixed-window, name: reports, shadow: true}
  - name: bar-paths
    rules:
      - {rate: 2/second, by: path, strategy: fixed-window, name: per-path}
"""

Status = tuple[str, int, int]  # code, limit_remaining, duration_until_reset


@dataclass
class Envoy:
    """``ShouldRateLimit``: an overall code, and each descriptor's status."""

    config: Mapping[str, Any] = field(default_factory=lambda: yaml.safe_load(ENVOY))
    counts: dict[tuple[Entries, int], int] = field(default_factory=dict)

    def _node(self, entries: Entries) -> Mapping[str, Any] | None:
        level, node = self.config["descriptors"], None
        for key, value in entries:
            found = [d for d in level if d["key"] == key and d.get("value") == value]
            found = found or [d for d in level if d["key"] == key and "value" not in d]
            if not found:
                return None
            node = found[0]
            level = node.get("descriptors", [])
        return node

    def should(
        self, now: float, descriptors: Sequence[Entries], hits_addend: int = 0
    ) -> tuple[str, list[Status | None]]:
        hits, second = max(1, hits_addend), int(now)
        statuses: list[Status | None] = []
        for entries in descriptors:
            node = self._node(entries)
            limit = None if node is None else node.get("rate_limit")
            if limit is None or limit.get("unlimited"):
                statuses.append(None)  # OK, no limit
                continue
            unit, per = UNITS[limit["unit"]], limit["requests_per_unit"]
            window = (entries, second // unit * unit)
            after = self.counts[window] = self.counts.get(window, 0) + hits
            over = "OK" if node.get("shadow_mode") else "OVER_LIMIT"  # type: ignore[union-attr]
            code, left = (over, 0) if after > per else ("OK", per - after)
            statuses.append((code, left, unit - second % unit))
        over_limit = any(s is not None and s[0] == "OVER_LIMIT" for s in statuses)
        return ("OVER_LIMIT" if over_limit else "OK"), statuses


def ip(address: str) -> Entries:
    return (("remote_address", address),)


def _guard(clock: ManualClock) -> Guard:
    return loads(OURS, "yaml").guard(clock)


def _status(d: Decision) -> Status:
    return ("OK" if d.allowed else "OVER_LIMIT", d.remaining, int(d.reset_after))


def _serve(clock: ManualClock, calls: list[tuple[str, str, object]]) -> list[httpx.Response]:
    app = create_app(loads(OURS, "yaml").async_guard(clock))

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            sent = {"content-type": "application/json"}
            return [
                await http.request(method, path, content=json.dumps(body), headers=sent)
                for method, path, body in calls
            ]

    return asyncio.run(run())


def test_a_descriptor_key_is_by() -> None:
    """`key: remote_address` alone: each address its own count, in the domain's policy."""
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    for address in ["1.2.3.4"] * 4 + ["5.6.7.8"]:
        _, [theirs] = envoy.should(START, [ip(address)])
        assert _status(guard.hit("edge", remote_address=address)) == theirs


def test_a_descriptor_value_is_a_tier() -> None:
    """`key: remote_address, value: 50.0.0.5`: that address at its own rate, in the file."""
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    for address in ["50.0.0.5"] * 6 + ["1.2.3.4"] * 4:
        _, [theirs] = envoy.should(START, [ip(address)])
        assert _status(guard.hit("edge", remote_address=address)) == theirs


@pytest.mark.parametrize("unit", list(UNITS))
def test_units_are_fixed_windows(unit: str) -> None:
    """Both align a window to the epoch (a day at UTC midnight): the same answers across
    an edge, and the same seconds until it."""
    size = UNITS[unit]
    limit = {"unit": unit, "requests_per_unit": 2}
    config = {"domain": "d", "descriptors": [{"key": "k", "rate_limit": limit}]}
    envoy = Envoy(config)
    edge = (int(START) // size + 1) * size
    clock = ManualClock(edge - 1)
    ours = loads(
        f"policy: [{{name: d, rules: [{{rate: 2/{unit}, by: k, strategy: fixed-window}}]}}]", "yaml"
    )
    guard = ours.guard(clock)
    for at in [edge - 1] * 3 + [edge] * 3:
        clock.set(at)
        _, [theirs] = envoy.should(at, [(("k", "v"),)])
        assert _status(guard.hit("d", k="v")) == theirs


def test_the_default_is_a_sliding_log() -> None:
    """Without `strategy`, freqguard's rule holds in every window of its length: Envoy's
    fixed window admits twice its limit across an edge, the sliding log never does."""
    envoy = Envoy()
    edge = (int(START) // 60 + 1) * 60
    clock = ManualClock(edge - 1)
    guard = loads("policy: [{name: e, rules: [{rate: 3/minute, by: remote_address}]}]", "yaml")
    sliding = guard.guard(clock)
    theirs, ours = [], []
    for at in [edge - 1] * 3 + [edge] * 3:
        clock.set(at)
        theirs.append(envoy.should(at, [ip("1.2.3.4")])[0] == "OK")
        ours.append(sliding.hit("e", remote_address="1.2.3.4").allowed)
    assert theirs == [True] * 6
    assert ours == [True] * 3 + [False] * 3


def test_hits_addend_is_cost() -> None:
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    _, [theirs] = envoy.should(START, [ip("1.2.3.4")], hits_addend=2)
    assert _status(guard.hit("edge", 2, remote_address="1.2.3.4")) == theirs


def test_denied_hits_count_nothing() -> None:
    """Envoy counts a request over the limit too: after a denied 3, one more is denied in
    that window. freqguard counts what it admits, so the one fits."""
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    envoy.should(START, [ip("a")])
    guard.hit("edge", remote_address="a")
    assert envoy.should(START, [ip("a")], hits_addend=3)[0] == "OVER_LIMIT"
    assert not guard.hit("edge", 3, remote_address="a").allowed
    assert envoy.should(START, [ip("a")])[0] == "OVER_LIMIT"
    assert guard.hit("edge", remote_address="a").allowed


def test_hits_addend_zero() -> None:
    """Envoy counts a 0 as 1; freqguard's cost 0 counts nothing, and asks."""
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    assert envoy.should(START, [ip("a")], hits_addend=0)[1] == [("OK", 2, 60 - int(START) % 60)]
    assert guard.hit("edge", 0, remote_address="a").remaining == 3


def test_hits_addend_above_the_limit() -> None:
    clock, envoy = ManualClock(START), Envoy()
    assert envoy.should(START, [ip("a")], hits_addend=4)[0] == "OVER_LIMIT"
    with pytest.raises(ConfigError, match="exceeds the capacity 3"):
        _guard(clock).hit("edge", 4, remote_address="a")
    [answer] = _serve(
        clock, [("POST", "/v1/policies/edge/hit", {"context": {"remote_address": "a"}, "cost": 4})]
    )
    assert (answer.status_code, answer.json()["field"]) == (422, "cost")


def test_nested_descriptors() -> None:
    """`header_match: bar` then `path`: Envoy makes the first entry only when the header
    matched; the caller asks the policy of those paths only then."""
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    for path in ["/a", "/a", "/a", "/b"]:
        _, [theirs] = envoy.should(START, [(("header_match", "bar"), ("path", path))])
        assert _status(guard.hit("bar-paths", path=path)) == theirs
    assert envoy.should(START, [(("header_match", "baz"), ("path", "/a"))])[1] == [None]


def test_several_descriptors() -> None:
    """One request, two descriptors: Envoy counts both though one is over; one freqguard
    policy of both rules consumes from neither when one denies, and wants both values."""
    clock, envoy = ManualClock(START), Envoy()
    both = (
        "policy: [{name: both, rules: [{rate: 3/minute, by: remote_address, strategy: "
        "fixed-window}, {rate: 2/second, by: path, strategy: fixed-window}]}]"
    )
    guard = loads(both, "yaml").guard(clock)
    request = [ip("a"), (("header_match", "bar"), ("path", "/a"))]
    codes = [envoy.should(START, request)[0] for _ in range(3)]
    assert codes == ["OK", "OK", "OVER_LIMIT"]
    assert envoy.should(START, [ip("a")])[1][0] == ("OVER_LIMIT", 0, 60 - int(START) % 60)
    ours = [guard.hit("both", remote_address="a", path="/a").allowed for _ in range(3)]
    assert ours == [True, True, False]
    assert guard.hit("both", remote_address="a", path="/b").allowed  # the denial took nothing
    [missing] = _serve(clock, [("POST", "/v1/policies/edge/hit", {"context": {"path": "/a"}})])
    assert missing.status_code == 422


def test_shadow_mode() -> None:
    clock, envoy = ManualClock(START), Envoy()
    guard = _guard(clock)
    for _ in range(4):
        code, [status] = envoy.should(START, [(("generic_key", "reports"),)])
        decision = guard.hit("reports")
        assert (code, decision.allowed, decision.denied_by) == ("OK", True, ())
    assert status is not None
    assert status[0] == "OK"
    assert (decision.rules[0].allowed, decision.rules[0].rule.shadow) == (False, True)


def test_unlimited() -> None:
    """`value: 10.0.0.1, rate_limit: {unlimited: true}`: a per-key limit of none, set at
    run time (the service's PUT, the CLI's `limit set ... none`): never denied, still
    counted as a shadow rule is."""
    clock, envoy = ManualClock(START), Envoy()
    assert all(envoy.should(START, [ip("10.0.0.1")])[0] == "OK" for _ in range(5))
    context = {"remote_address": "10.0.0.1"}
    put = ("PUT", "/v1/policies/edge/limits/per-ip", {"context": context, "rate": None})
    hit = ("POST", "/v1/policies/edge/hit", {"context": context})
    answers = _serve(clock, [put] + [hit] * 5)
    assert answers[0].json()["limits"]["per-ip"] is None
    assert all(a.json()["allowed"] for a in answers[1:])
    assert answers[-1].json()["rules"][0]["exempt"] is True


def test_the_answer() -> None:
    """OVER_LIMIT (`/json`: a 429) is a 200 whose `allowed` is false; each descriptor's
    `limit_remaining` and `duration_until_reset` are each rule's `remaining`, `reset_after`."""
    clock, envoy = ManualClock(START), Envoy()
    hit = ("POST", "/v1/policies/edge/hit", {"context": {"remote_address": "a"}})
    answers = _serve(clock, [hit] * 4)
    for answer in answers:
        code, [theirs] = envoy.should(START, [ip("a")])
        body = answer.json()
        assert answer.status_code == 200
        rule = body["rules"][0]
        ours = (
            "OK" if body["allowed"] else "OVER_LIMIT",
            rule["remaining"],
            int(rule["reset_after"]),
        )
        assert (code, ours) == (theirs[0] if theirs else "OK", theirs)


def test_x_ratelimit_headers() -> None:
    """Envoy's filter's `x-ratelimit-limit`, `-remaining`, `-reset`: the `x-ratelimit`
    profile of the HTTP integrations (`rate_limit_headers` for a decision in hand)."""
    clock, envoy = ManualClock(START), Envoy()
    _, [(_, left, reset)] = envoy.should(START, [ip("a")])  # type: ignore[misc]
    headers = rate_limit_headers(_guard(clock).hit("edge", remote_address="a"), "x-ratelimit")
    assert headers == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": str(left),
        "X-RateLimit-Reset": str(reset),
    }
