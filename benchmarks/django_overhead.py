"""What the Django integration adds to a request, next to django-ratelimit, in process.

    python -m benchmarks.django_overhead [--requests 20000] [--rounds 3]

One view (``GET /hello``, a plain ``HttpResponse``) behind Django's WSGI handler, called
directly (no server, no socket), every request allowed (``1000000/minute``), one client
address:

* ``bare``: the view, no limiting;
* ``freqguard middleware``: ``FreqGuardMiddleware``, the view ``@capped`` (the middleware
  decides the cap before the view runs);
* ``freqguard @capped``: the same view, no middleware (the decorator decides);
* ``django-ratelimit``: the view decorated with ``@ratelimit(key="ip", block=True)`` on
  Django's local-memory cache (its default backend: the cache).

freqguard decides on the memory backend, a fixed window keyed by the peer address, as
django-ratelimit counts (a cache counter per window). Timed in the process's CPU time,
which a busy machine's other processes do not inflate as they do the wall clock.

Reported: CPU µs per request (best of the rounds), the overhead over ``bare``, and each
overhead's ratio to django-ratelimit's.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable, Iterable
from typing import Any

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="benchmark-only",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    DATABASES={},
    CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    RATELIMIT_USE_CACHE="default",
)
django.setup()

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django_ratelimit.decorators import ratelimit  # noqa: E402

from freqguard import Rule, Strategy  # noqa: E402
from freqguard.integrations.django import capped  # noqa: E402

RATE = Rule("1000000/minute", by="client", strategy=Strategy.FIXED_WINDOW)  # client_ip()'s
MIDDLEWARE = "freqguard.integrations.django.FreqGuardMiddleware"


def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


@capped(RATE)
def hello_capped(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


@ratelimit(key="ip", rate="1000000/m", block=True)  # type: ignore[untyped-decorator]
def hello_ratelimit(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


urlpatterns = [
    path("hello", hello),
    path("capped", hello_capped),
    path("ratelimit", hello_ratelimit),
]


def _handler(middleware: list[str]) -> WSGIHandler:
    with override_settings(MIDDLEWARE=middleware):
        return WSGIHandler()  # loads the middleware now, from the settings in force


def _run(handler: WSGIHandler, where: str, requests: int) -> float:
    """CPU µs per request."""
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": where,
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "REMOTE_ADDR": "203.0.113.7",
        "wsgi.url_scheme": "http",
    }

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        assert status.startswith("200"), status

    start = time.process_time()  # CPU time: another process's time slices do not count
    for _ in range(requests):
        handler({**environ, "wsgi.input": io.BytesIO(b"")}, start_response).close()
    return (time.process_time() - start) / requests * 1e6


CASES: dict[str, tuple[list[str], str]] = {
    "bare": ([], "/hello"),
    "freqguard middleware": ([MIDDLEWARE], "/capped"),
    "freqguard @capped": ([], "/capped"),
    "django-ratelimit": ([], "/ratelimit"),
}


def measure(requests: int, rounds: int) -> dict[str, float]:
    """Each case's best µs per request over the rounds (cases interleaved per round)."""
    handlers = {name: _handler(middleware) for name, (middleware, _) in CASES.items()}
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, (_, where) in CASES.items():
            _run(handlers[name], where, requests // 10)  # warm up
            took = _run(handlers[name], where, requests)
            best[name] = min(best.get(name, took), took)
    return best


def report(best: dict[str, float], out: Callable[[str], Any] = print) -> None:
    bare = best["bare"]
    theirs = best["django-ratelimit"] - bare
    out(f"{'case':<22}{'µs/req':>9}{'overhead µs':>13}{'vs django-ratelimit':>21}")
    for name, took in best.items():
        over = took - bare
        ratio = f"{over / theirs:.2f}x" if name != "bare" else ""
        out(f"{name:<22}{took:>9.1f}{over:>13.1f}{ratio:>21}")


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(None if argv is None else list(argv))
    report(measure(args.requests, args.rounds))


if __name__ == "__main__":
    main()
