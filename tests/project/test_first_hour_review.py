"""A newcomer's first hour (an experienced user of limits, Flask-Limiter and DRF), from a
clean clone, following README.md and the docs: the findings in the docs and the command
line, each a failing test. The command line runs as the installed package runs it
(``sys.executable -m freqguard``), with a timeout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.config import ENV
from tests.conftest import flush
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"


def _freqguard(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if url is not None:
        env[ENV] = url
    return subprocess.run(
        [sys.executable, "-m", "freqguard", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
        cwd=ROOT,
    )


def _section(page: Path, heading: str) -> str:
    """The text of ``page`` from ``heading`` to the next heading of the same level."""
    text = page.read_text(encoding="utf-8")
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    after = re.search(rf"^{re.escape(level)} ", text[start + len(heading) :], re.MULTILINE)
    return text[start : start + len(heading) + (after.start() if after else len(text))]


def test_the_per_key_limits_page_does_not_deny_what_concepts_and_the_code_do_with_a_cost() -> None:
    """What I read: docs/limits.md:118-119, under "What it does not do": "`cost` is still
    bounded by the rules' own capacities (a `ConfigError` above them), not by a limit that
    raises one." So, for a VIP given ``set_limit(..., "10/minute")`` on a ``2/minute`` rule,
    I expected ``hit(cost=5)`` to be a ConfigError and wrote my batching around it.

    What happened: ``hit(cost=5)`` is allowed (``remaining=5, capacity=10``), as
    docs/concepts.md:27-31 ("the capacity as decided for that hit, ..., its per-key
    limit's") and docs/strategies.md:122 say; commit 33ca5c9 changed the rule and left this
    sentence of limits.md behind. Two pages of the docs disagree, and limits.md is the one
    that is wrong.

    Expected: limits.md says what the code and concepts.md say (a cost is bounded by the
    capacity as decided, the per-key limit's included)."""
    guard = Guard(
        MemoryBackend(), [Policy("p", Rule("2/minute", by="user", name="r"))], ManualClock(1e9)
    )
    guard.set_limit("p", "r", "10/minute", user="vip")
    assert guard.hit("p", 5, user="vip").allowed  # what the code does: the limit's capacity
    page = (DOCS / "limits.md").read_text(encoding="utf-8")
    stale = re.search(r"`cost` is still\s+bounded by the rules' own capacities", page)
    assert stale is None, "docs/limits.md:118 says a raised limit leaves the cost bound"


def test_inspect_does_not_show_quiet_hours_as_a_billion_of_a_billion(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """What I did: put the README's "push" policy (README.md, the ``QuietHours`` block) in a
    configuration file and ran ``freqguard inspect push.toml push recipient=dana
    tz=Europe/Berlin priority=marketing`` on my Redis (docs/cli.md:62: "each rule's use for
    one context: used, remaining, when it frees, whether a hit now would pass").

    What happened: besides the real rules, a row ``quiet-hours  0  1000000000  1000000000``
    (or ``0  1000000000`` during the quiet hours): an operator reads that the recipient has a
    billion sends left of a billion. docs/messaging.md:152-153 says the pseudo-rule "has no
    rate"; the number is an internal stand-in (``--json`` gives ``"capacity": 1000000000``).

    Expected: the quiet hours shown as what they are (quiet now or not, until when), never
    as a quota of 1,000,000,000."""
    flush([redis_server])
    config = tmp_path / "push.toml"
    config.write_text(
        "[[policy]]\n"
        'name = "push"\n'
        'priorities = ["transactional", "marketing"]\n'
        'quiet = { start = "21:00", end = "08:00", tz_from = "tz", exempt = ["transactional"] }\n'
        "rules = [\n"
        '  { rate = "3/day", by = "recipient", calendar = true, tz_from = "tz",'
        " caps = { marketing = 2 } },\n"
        "]\n"
    )
    done = _freqguard(
        "inspect",
        str(config),
        "push",
        "recipient=dana",
        "tz=Europe/Berlin",
        "priority=marketing",
        url=f"redis://127.0.0.1:{redis_server.port}/0",
    )
    assert done.returncode == 0, done.stderr
    assert "1000000000" not in done.stdout, done.stdout


def test_the_docs_say_how_to_close_a_guard_on_redis() -> None:
    """What I did: wrote the README's SMS case as an asyncio program,
    ``AsyncGuard(async_backend_from_url("redis://..."), policies=[SMS])``, hits in
    ``asyncio.run(main())``, as README.md ("`AsyncGuard` has the same methods, awaited")
    and docs/concepts.md:81-82 show; then ran it with ``python -W default`` (as pytest runs
    my own tests).

    What happened: ``ResourceWarning: unclosed <socket.socket ...>``, ``unclosed transport``
    and redis-py's ``unclosed Connection`` at exit. ``AsyncGuard.aclose()``,
    ``async with AsyncGuard(...)`` and ``Guard.close()`` exist (their docstrings, and the
    generated API reference), but README.md, docs/concepts.md and docs/redis.md (the pages
    that show a guard on Redis) never say a guard holds connections to close, nor how;
    only docs/django.md mentions ``aclose`` (of the Django integration's guard).

    Expected: the pages that make a guard on Redis say to close it (``guard.close()``,
    ``await guard.aclose()`` or ``async with``)."""
    pages = [ROOT / "README.md", DOCS / "concepts.md", DOCS / "redis.md"]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    assert re.search(r"aclose\(\)|async with AsyncGuard|guard\.close\(\)", text), (
        "no narrative page says how to close a guard's connections"
    )


def test_the_starlette_section_says_what_a_limit_is_keyed_by_when_given_no_key() -> None:
    """What I did: copied the README's Starlette block, ``Limit("/api/{rest:path}",
    "100/minute")`` with no ``key``, and read docs/integrations.md's "Starlette / FastAPI"
    section (lines 102-331) to learn whom that 100/minute is per: per client, per API key,
    or for everybody. I deploy behind a load balancer, where that matters most.

    What happened: the section never says. The Flask section does (docs/integrations.md:
    382-383, "The default key is `remote_address`: the peer"); for a ``Limit`` only the
    docstring of ``freqguard.integrations._http.Limit`` says "default: client_ip with no
    trusted proxies", i.e. the peer, so behind a proxy every client shares the proxy's one
    budget. Flask-Limiter and slowapi users always name ``get_remote_address`` themselves,
    so they look for this line.

    Expected: the Starlette section states a ``Limit``'s default key (the peer's address,
    proxies' headers not read: give ``key=client_ip([...])`` behind a proxy)."""
    section = _section(DOCS / "integrations.md", "## Starlette / FastAPI")
    says_default = re.search(
        r"(default key|by default[^.]*\b(peer|client_ip)|without a `?key`?[^.]*\b(peer|client))",
        section,
        re.IGNORECASE,
    )
    assert says_default, (
        "docs/integrations.md's Starlette section never states a Limit's default key"
    )


def test_the_rate_grammar_says_how_long_a_month_and_a_year_are(tmp_path: Path) -> None:
    """What I did: read docs/concepts.md:3-6 (rates "parsed from the grammar of `limits`
    ..., and `"3/week"`, 7 days"), wrote ``Rule("1/year", by="recipient")`` for a yearly
    reminder, and ran ``freqguard check`` on it.

    What happened: ``check`` prints "at most 1 in any 8640 hours": a year is 360 days here
    (limits' ``12 * 30`` days) and a month 30 days, so the second reminder may go out five
    days before the anniversary. No page says so; docs/strategies.md:119 even measures the
    window bound in "10 years (of 366 days)", a different year from the one ``"1/year"``
    means. concepts.md spells out the one unit it adds (a week, 7 days) but not these two.

    Expected: the page that gives the grammar says a month is 30 days and a year 360 (or
    the grammar gives a year 365 days)."""
    config = tmp_path / "remind.toml"
    config.write_text(
        '[[policy]]\nname = "remind"\nrules = [{ rate = "1/year", by = "recipient" }]\n'
    )
    done = _freqguard("check", str(config))
    assert done.returncode == 0, done.stderr
    assert "8640 hours" in done.stdout  # what the file's "1/year" is
    concepts = (DOCS / "concepts.md").read_text(encoding="utf-8")
    assert "360 days" in concepts, "docs/concepts.md does not say how long a year is"
    assert "30 days" in concepts, "docs/concepts.md does not say how long a month is"
