"""The first matching Limit decides a request: a Limit that an earlier one wholly covers
(its methods and every path it matches) can never decide one, and is refused when the
middleware is built, naming both (found by a user coming from slowapi:
``[Limit("/{rest:path}", "3/minute"), Limit("/login", "1/minute")]`` left /login on 3/minute,
silently). Partial overlaps stay: first match wins by design."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.convertors import CONVERTOR_TYPES, Convertor

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.asgi import FreqGuardMiddleware, Limit
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from tests.conftest import examples


async def _asgi_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called: the middleware is only built")


def _wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    raise AssertionError("never called: the middleware is only built")


def _asgi(limits: Sequence[Limit]) -> object:
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    return FreqGuardMiddleware(_asgi_app, guard=guard, limits=limits)


def _wsgi(limits: Sequence[Limit]) -> object:
    guard = Guard(MemoryBackend(), clock=ManualClock(1000))
    return WSGIMiddleware(_wsgi_app, guard=guard, limits=limits)


BUILDERS = pytest.mark.parametrize("build", [_asgi, _wsgi], ids=["asgi", "wsgi"])


@BUILDERS
def test_a_catch_all_before_a_route_is_refused_naming_both_and_the_fix(
    build: Callable[[Sequence[Limit]], object],
) -> None:
    limits = [Limit("/{rest:path}", "3/minute"), Limit("/login", "1/minute")]
    with pytest.raises(ConfigError) as refused:
        build(limits)
    assert str(refused.value) == (
        "limits[1], Limit('/login'), can never decide a request: limits[0], "
        "Limit('/{rest:path}'), comes first and matches every request it matches (the first "
        "matching Limit decides); put limits[1], the narrower, before limits[0], or narrow "
        "limits[0]'s methods"
    )


@BUILDERS
@pytest.mark.parametrize(
    ("earlier", "later", "shown"),
    [
        (("/items/{id}", None), ("/items/special", None), "Limit('/items/{id}')"),
        (("/sms", None), ("/sms", ["post"]), "Limit('/sms')"),
        (("/api/{rest:path}", None), ("/api/v1/users/me", ["GET"]), "Limit('/api/{rest:path}')"),
        (("/page", ["GET"]), ("/page", ["HEAD"]), "Limit('/page', methods=['GET'])"),
        (("/page", ["POST", "GET"]), ("/page", ["GET"]), "methods=['GET', 'POST']"),
        (("/items/{id}", None), ("/items/{n:int}", None), "Limit('/items/{id}')"),
        (("/items/{id:float}", None), ("/items/{n:int}", None), "{id:float}"),
        (("/f/{name}", None), ("/f/{u:uuid}", ["DELETE"]), "Limit('/f/{name}')"),
        (("/{rest:path}", None), ("/a/{b}/{c:path}", None), "{rest:path}"),
        (("/u/{a}/{b}", ["PUT"]), ("/u/{x}/{y}", ["PUT"]), "methods=['PUT']"),
        (("/{rest:path}", None), ("/", None), "Limit('/{rest:path}')"),
    ],
)
def test_a_limit_wholly_covered_by_an_earlier_one_is_refused(
    build: Callable[[Sequence[Limit]], object],
    earlier: tuple[str, list[str] | None],
    later: tuple[str, list[str] | None],
    shown: str,
) -> None:
    limits = [
        Limit("/other", "9/minute"),
        Limit("/another/{x}", "9/minute"),
        Limit(earlier[0], "5/minute", methods=earlier[1]),
        Limit(later[0], "1/minute", methods=later[1]),
    ]
    with pytest.raises(ConfigError, match=r"^limits\[3\], Limit\(.*limits\[2\], ") as refused:
        build(limits)
    assert shown in str(refused.value)
    assert repr(later[0]) in str(refused.value)


@BUILDERS
@pytest.mark.parametrize(
    ("first", "second", "later"),
    [
        (("/sms", ["GET"]), ("/sms", ["POST"]), ("/sms", ["GET", "POST"])),
        (("/sms/{to}", ["POST"]), ("/{rest:path}", ["GET"]), ("/sms/x", ["POST", "GET"])),
        (("/page", ["HEAD"]), ("/page", ["POST"]), ("/page", ["POST", "HEAD"])),
    ],
)
def test_a_limit_covered_by_earlier_ones_together_is_refused_naming_them(
    build: Callable[[Sequence[Limit]], object],
    first: tuple[str, list[str] | None],
    second: tuple[str, list[str] | None],
    later: tuple[str, list[str] | None],
) -> None:
    """Each earlier Limit takes some of the later one's methods on all of its paths: none
    covers it alone, together they leave it no request (found by review)."""
    limits = [
        Limit(first[0], "5/minute", methods=first[1]),
        Limit("/other", "9/minute"),
        Limit(second[0], "5/minute", methods=second[1]),
        Limit(later[0], "1/minute", methods=later[1]),
    ]
    with pytest.raises(ConfigError) as refused:
        build(limits)
    assert str(refused.value).startswith(
        f"limits[3], {_shown(later)}, can never decide a request: limits[0], "
        f"{_shown(first)}, and limits[2], {_shown(second)}, come first and match every "
        "request it matches between them"
    )


def _shown(limit: tuple[str, list[str] | None]) -> str:
    return f"Limit({limit[0]!r}, methods={sorted(limit[1] or ())!r})"


def test_two_limits_for_the_same_requests_are_told_to_be_one() -> None:
    """Moving one before the other would not help: both match the same requests."""
    limits = [Limit("/sms/{to}", "5/minute"), Limit("/sms/{recipient}", "1/minute")]
    with pytest.raises(ConfigError, match=r"both match the same requests: .*one Limit"):
        _asgi(limits)


@BUILDERS
@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (("/login", None), ("/{rest:path}", None)),
        (("/items/special", None), ("/items/{id}", None)),
        (("/a/{x}", None), ("/{y}/b", None)),
        (("/sms", ["GET"]), ("/sms", ["POST"])),
        (("/sms", ["POST"]), ("/sms", None)),
        (("/page", ["HEAD"]), ("/page", ["GET"])),
        (("/items/{id:int}", None), ("/items/{name}", None)),
        (("/items/{id:int}", None), ("/items/{x:float}", None)),
        (("/f/{u:uuid}", None), ("/f/{name}", None)),
        (("/static/{name}", None), ("/static/{rest:path}", None)),
        (("/users/{id}", None), ("/users/{id}/posts", None)),
        (("/api/{rest:path}", None), ("/{rest:path}", None)),
        (("/files/{name}.txt", None), ("/files/{name}", None)),
    ],
)
def test_a_partial_overlap_is_allowed_first_match_wins(
    build: Callable[[Sequence[Limit]], object],
    earlier: tuple[str, list[str] | None],
    later: tuple[str, list[str] | None],
) -> None:
    build(
        [
            Limit(earlier[0], "5/minute", methods=earlier[1]),
            Limit(later[0], "1/minute", methods=later[1]),
        ]
    )


def _own(regex: str) -> Convertor[str]:
    """A convertor taking what ``regex`` matches, as an application registers one."""

    class Own(Convertor[str]):
        def convert(self, value: str) -> str:
            return value

        def to_string(self, value: str) -> str:
            return value

    Own.regex = regex
    return Own()


@pytest.mark.parametrize(
    "regex", ["[a-z0-9-]+", "[^/]{5,}", "[^/]{1,12}", "[^/]{1,64}", "[^/.][^/]*"]
)
def test_an_own_convertor_before_a_wider_parameter_is_allowed(
    monkeypatch: pytest.MonkeyPatch, regex: str
) -> None:
    """An application's convertor (Starlette's ``register_url_convertor``, global) narrower
    than ``str`` (in its characters, or a least or most length): ``/t/Hi``, or a long
    value, reaches the later one. Its values are unknown here, so it covers nothing: one
    that took all of the later one's probes (at most 64 characters, no leading dot) was
    taken to cover it, and a live Limit refused (found by review)."""
    monkeypatch.setitem(CONVERTOR_TYPES, "own", _own(regex))
    _asgi([Limit("/t/{s:own}", "5/minute"), Limit("/t/{x}", "1/minute")])


# The property: small random route lists over a tiny alphabet. Whenever a Limit is refused,
# no request of a brute-forced set reaches it first (a refusal is never of a Limit that
# decides some request); the check may miss some covered Limit, never refuse a live one.
_SEGMENTS = ["a", "b", "{p}", "{p:int}", "{p:path}", "{p:float}"]
_METHODS: list[list[str] | None] = [None, ["GET"], ["POST"], ["HEAD"], ["GET", "POST"]]
_VALUES = ["a", "b", "7", "x", "2.5", "a/b", "7/a", ""]
_SENT = ["GET", "HEAD", "POST", "PUT"]
#: Starlette's convertors, written here again: the reference the middleware is held to
_REGEX = {"str": "[^/]+", "int": "[0-9]+", "path": ".*", "float": r"[0-9]+(\.[0-9]+)?"}


def _pattern(segments: Sequence[str]) -> str:
    named = (s.replace("{p", f"{{p{i}") for i, s in enumerate(segments))
    return "/" + "/".join(named)


def _paths() -> list[str]:
    paths = {"/"}
    for size in (1, 2, 3):
        for parts in itertools.product(_VALUES, repeat=size):
            paths.add("/" + "/".join(parts))
    return sorted(paths)


_PATHS = _paths()


def _first(limits: Sequence[Limit], method: str, path: str) -> int | None:
    """Which of ``limits`` decides the request, as the middleware finds it."""
    for index, limit in enumerate(limits):
        methods = limit.methods
        if methods is not None and "GET" in methods:
            methods = methods | {"HEAD"}
        if methods is not None and method not in methods:
            continue
        regex = "".join(
            re.escape(part) if i % 2 == 0 else _REGEX[part.partition(":")[2] or "str"]
            for i, part in enumerate(re.split(r"{([^}]*)}", limit.path))
        )
        if re.fullmatch(regex, path):
            return index
    return None


@settings(max_examples=examples(150))
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3),
            st.sampled_from(_METHODS),
        ),
        min_size=2,
        max_size=4,
    )
)
def test_a_refused_limit_decides_no_request(
    routes: list[tuple[list[str], list[str] | None]],
) -> None:
    limits = [
        Limit(_pattern(segments), "5/minute", methods=methods, name=f"r{i}")
        for i, (segments, methods) in enumerate(routes)
    ]
    try:
        _wsgi(limits)
    except ConfigError as error:
        message = str(error)
    else:
        return  # built: nothing refused to judge
    found = re.match(r"limits\[(\d+)\].*?limits\[(\d+)\]", message)
    assert found is not None, message
    refused, earlier = int(found.group(1)), int(found.group(2))
    assert earlier < refused
    reached = [
        (method, path)
        for method in _SENT
        for path in _PATHS
        if _first(limits, method, path) == refused
    ]
    assert not reached, f"{limits[refused]} refused, yet it decides {reached[:3]}"


def test_each_limit_is_checked_against_the_earlier_ones_its_literal_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compiling n Limits checked each against every earlier one: 2,000 generated routes
    (a route per tenant) took 1.4 s, 4,000 took 5.4 (quadratic). Only an earlier Limit
    whose pattern's literal start begins every probe of a later one can cover it."""
    import freqguard.integrations._first_match as first_match

    checks = []
    real = first_match._paths_cover

    def counted(*args: Any) -> bool:
        checks.append(args)
        return real(*args)

    monkeypatch.setattr(first_match, "_paths_cover", counted)
    limits = [Limit("/{rest:path}", "9/minute", methods=["PUT"])]
    limits += [Limit(f"/api/tenant{i}/{{item}}", "5/minute", name=f"t{i}") for i in range(500)]
    _asgi(limits)
    assert len(checks) <= 3 * len(limits)
