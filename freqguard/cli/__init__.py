"""The ``freqguard`` command: the demo, and an operator's commands on a configuration file.

    freqguard --version
    freqguard demo
    freqguard check CONFIG                      each policy, each rule's guarantee
    freqguard inspect CONFIG POLICY k=v ...     each rule's use for one context
    freqguard reset CONFIG POLICY k=v ... [--rule R]  forget counts keyed by exactly k=v
    freqguard limit show|set|clear CONFIG POLICY [RULE [RATE]] k=v ... [--ttl S]
    freqguard replay CONFIG LOG [--what-if CONFIG2]   a log decided again (see .replay)
    freqguard ping CONFIG|URL                   reach the store, load the function
    freqguard flush CONFIG|URL [--prefix P] --yes   delete freqguard's keys (Cluster too)
    freqguard serve CONFIG [--port P] [--workers N] [--access-log json] [--history off]
                                                the decision service

Every command but ``demo`` takes ``--json`` for a machine's output. Exit codes: 0 done,
1 the store failed (unreachable, an error reply), 2 a usage or configuration error (a bad
argument, a file that does not load, a context the policy cannot decide). Output to a pipe
closed early (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from freqguard.cli import operate, replay, store, words
from freqguard.cli.output import EXIT_OK, EXIT_STORE, EXIT_USAGE, Parser, masked, out, say
from freqguard.errors import BackendUnavailable, ConfigError, shown
from freqguard.rates import Rate
from freqguard.rules import Rule, Strategy
from freqguard.script.strategies import rolling_window

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # as a shell reports a command ended by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code (see the module's docs)."""
    for stream in (sys.stdout, sys.stderr):  # a word that is not UTF-8 prints escaped
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = _parser()
    words = sys.argv[1:] if argv is None else list(argv)
    if words and all(w.startswith("-") for w in words):  # options, and no command
        unknown = [w for w in words if w not in ("-h", "--help", "--version")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)} (a COMMAND comes first)")
    args, extra = parser.parse_known_args(argv)
    words_after = isinstance(getattr(args, "context", None), list)  # k=v words after an
    if extra and words_after and all("=" in w and not w.startswith("-") for w in extra):
        args.context.extend(extra)  # option: still the context (argparse stops at one)
        extra = []
    if extra:
        parser.parse_args(argv)  # the error argparse gives them, and exit 2
    try:
        return int(args.run(args))
    except ConfigError as exc:  # every mistake in the words, the files or the logs
        say(f"freqguard: {exc}")
        return EXIT_USAGE
    except BackendUnavailable as exc:
        say(f"freqguard: the store failed: {exc}")
        return EXIT_STORE
    except BrokenPipeError:  # `freqguard ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error as Python flushes at exit
        return EXIT_OK
    except KeyboardInterrupt:
        say("freqguard: interrupted")
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="freqguard",
        description="freqguard: frequency capping and rate limiting",
        epilog="the store: the configuration's backend, or FREQGUARD_URL when it is set; "
        "exit codes: 0 done, 1 the store failed, 2 a usage or configuration error",
    )
    parser.add_argument("--version", action="version", version=f"freqguard {_version()}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Command
    )

    demo = _described(commands, "demo", "a burst of SMS and a messaging scene, in memory")
    demo.add_argument(
        "--url", help="run it on this store instead (redis://...), under a prefix of its own"
    )
    demo.set_defaults(run=_demo)

    check = _command(commands, "check", "load a configuration; each policy and its rules")
    check.set_defaults(run=_check)

    inspect = _command(commands, "inspect", "each rule's use for one context (counts nothing)")
    _policy_and_context(inspect)
    inspect.set_defaults(run=operate.inspect)

    reset = _command(
        commands,
        "reset",
        "forget the counts of the rules keyed by exactly the dimensions given (or --rule's)",
    )
    _policy_and_context(reset)
    reset.add_argument(
        "--rule",
        action="append",
        metavar="RULE",
        help="reset this rule (again for more), keyed by exactly the values given",
    )
    reset.set_defaults(run=operate.reset)

    limit = _described(commands, "limit", "per-key limits: show, set or clear")
    actions = limit.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = _command(actions, "show", "each rule's rate for one partition value")
    _policy_and_context(show)
    show.set_defaults(run=operate.limit_show)
    put = _command(actions, "set", "one rule at another rate (none: exempt) for one value")
    put.add_argument("policy")
    put.add_argument("rule", help="the rule's name (id)")
    put.add_argument("rate", help='a rate ("60/minute"), or "none" (or "exempt") to exempt')
    put.add_argument("context", nargs="*", metavar="k=v", help="the partition value")
    put.add_argument("--ttl", type=_ttl, default=None, help="seconds (default: for ever)")
    put.set_defaults(run=operate.limit_set)
    clear = _command(actions, "clear", "back to the rule's own rate for one value")
    clear.add_argument("policy")
    clear.add_argument("rule")
    clear.add_argument("context", nargs="*", metavar="k=v")
    clear.set_defaults(run=operate.limit_clear)

    again = _command(commands, "replay", "a log of past messages decided again, on its times")
    again.add_argument("log", help="JSON Lines (.jsonl), or CSV (.csv) with a header")
    again.add_argument("--what-if", metavar="CONFIG2", help="another configuration, beside")
    again.add_argument("--policy", help="the policy of lines that name none")
    again.add_argument("--decisions", metavar="OUT", help="write each decision to OUT (JSONL)")
    again.add_argument("--no-progress", action="store_true", help="no progress bar")
    again.set_defaults(run=replay.command)

    ping = _command(
        commands,
        "ping",
        "reach the store, load its function where it is missing, time a call that reads "
        "(and writes nothing)",
        url=True,
    )
    ping.set_defaults(run=store.ping)

    flush = _command(
        commands,
        "flush",
        "delete freqguard's keys under the prefix (records and per-key limits, bins settings, "
        "the service's history), never another program's; a dry run but --yes",
        url=True,
    )
    flush.add_argument("--prefix", help="the key prefix (default: the configuration's)")
    flush.add_argument("--yes", action="store_true", help="delete; without it, only count")
    flush.set_defaults(run=store.flush)

    serve = _described(commands, "serve", "the decision service (HTTP/JSON) on uvicorn")
    serve.add_argument("config", help="a configuration file (TOML, or YAML)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=_within(1, 65535), default=8080, help="the port (default 8080)"
    )
    serve.add_argument(
        "--workers",
        type=_within(1, store.MAX_WORKERS),
        default=1,
        help="processes (more than one needs a shared store: Redis)",
    )
    serve.add_argument("--token-file", help="bearer tokens, one per line (or FREQGUARD_TOKENS)")
    serve.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="a name the service answers to in Host (a proxy's; again for more): on "
        "loopback it answers to localhost, 127.0.0.1 and ::1 only",
    )
    serve.add_argument("--log-level", default="warning", choices=store.LOG_LEVELS)
    serve.add_argument(
        "--access-log",
        choices=store.ACCESS_LOGS,
        default="off",
        help="json: a JSON line per request on stderr, context values digested",
    )
    serve.add_argument(
        "--history",
        choices=("on", "off"),
        default="on",
        help="on: keep decisions per minute and the top denied keys in the store, for the "
        "page's chart (default); off: keep none (the two reads answer 404)",
    )
    # checked by freqguard.service.server.pick, which owns the names (and imports uvicorn)
    serve.add_argument(
        "--loop", default="auto", help="the event loop: auto (uvloop if installed), uvloop, asyncio"
    )
    serve.add_argument(
        "--http",
        default="auto",
        help="the HTTP parser: auto (httptools if installed), httptools, h11",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=_within(1, 3600),
        default=30,
        metavar="SECONDS",
        help="on SIGTERM, how long requests in flight may take to finish (default 30)",
    )
    serve.set_defaults(run=store.serve)
    return parser


def _described(commands: Any, name: str, text: str) -> argparse.ArgumentParser:
    """A command whose ``--help`` says what it does, as the list of commands does."""
    made: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    return made


_STORE = " (the store is the configuration's backend, or FREQGUARD_URL when it is set)"


class _Command(Parser):
    """A command's parser that names an option it does not know under its own usage first:
    argparse left an unknown option to the top-level parser (``freqguard: error``, the
    usage of every command), or named only a missing argument when one was missing too."""

    _branches = False  # a command of commands (``limit``): its own commands name theirs

    def add_subparsers(self, **kwargs: Any) -> Any:
        self._branches = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        words = list(sys.argv[1:] if args is None else args)
        given = words[: words.index("--")] if "--" in words else words
        if not self._branches and not {"-h", "--help"} & set(given):
            known = [o for action in self._actions for o in action.option_strings]
            unknown = [word for word in given if _optional(word) and not _known(word, known)]
            if unknown:
                url = any(w.partition("=")[0] == "--url" for w in unknown)
                self.error(f"unrecognized arguments: {' '.join(unknown)}" + _STORE * url)
        return super().parse_known_args(words, namespace)


def _command(commands: Any, name: str, text: str, url: bool = False) -> argparse.ArgumentParser:
    made = _described(commands, name, text)
    what = "a configuration file or a URL" if url else "a configuration file (TOML, or YAML)"
    made.add_argument("config", metavar="CONFIG|URL" if url else None, help=what)
    made.add_argument("--json", action="store_true", help="JSON output, for machines")
    return made


def _optional(word: str) -> bool:
    """Whether argparse reads ``word`` as an option, not a value: it starts with ``-`` and
    is not ``-`` alone, a negative number, or a word holding a space."""
    negative = re.fullmatch(r"-[0-9_]*\.?[0-9_]+", word) is not None
    return word.startswith("-") and word != "-" and not negative and " " not in word


def _known(word: str, known: list[str]) -> bool:  # argparse takes a known option's prefix
    name = word.partition("=")[0]
    return any(option.startswith(name) for option in known)


def _policy_and_context(command: argparse.ArgumentParser) -> None:
    command.add_argument("policy")
    command.add_argument("context", nargs="*", metavar="k=v", help="the hit's context values")


def _within(low: int, high: int) -> Any:
    """An argparse type: an integer from ``low`` to ``high``."""

    def integer(text: str) -> int:
        if re.fullmatch(r"\s*-?[0-9]{1,9}\s*", text) is None or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high}, got {shown(text)}"
            )
        return int(text)

    return integer


def _ttl(text: str) -> float:
    """An argparse type: a limit's time to live, seconds > 0 (left out: for ever)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(
            "must be seconds > 0 (leave --ttl out for a limit that holds for ever), "
            f"got {shown(text)}"
        )
    return seconds


def _version() -> str:
    try:
        return version("freqguard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


# -- commands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from freqguard.demo import main as demo

    demo(args.url)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from freqguard.config import load

    config = words.with_policies(load(args.config), args.config, "check")
    for policy in config.policies:
        for first, second in words.alike(policy.dimensions):
            say(
                f"freqguard check: policy {policy.name!r}: dimensions {first!r} and "
                f"{second!r} are alike: a typo? (a hit must give each)"
            )
    policies: list[dict[str, Any]] = [
        {
            "policy": policy.name,
            "rule": rule.id,
            "guarantee": guarantee(rule),
            "by": list(rule.by),
        }
        for policy in config.policies
        for rule in policy.rules
    ]
    data = {"config": args.config, "backend": masked(config.backend), "rules": policies}

    def table() -> list[list[str]]:
        head = [["policy", "rule", "by", "guarantee"]]
        return head + [
            [r["policy"], r["rule"], ",".join(r["by"]) or "-", r["guarantee"]] for r in policies
        ]

    out(args, data, table)
    return EXIT_OK


# -- words ---------------------------------------------------------------------------------


def guarantee(rule: Rule) -> str:
    """What ``rule`` promises, in a line (``check``'s column)."""
    quiet = rule.quiet
    if quiet is not None:
        zone = quiet.tz or f"the hit's {quiet.tz_from}"
        text = f"nothing from {quiet.text(quiet.start)} to {quiet.text(quiet.end)} in {zone}"
        return text + (f" but for {', '.join(quiet.exempt)}" if quiet.exempt else "")
    n, window = rule.limit, _window(rule.rate)
    if rule.calendar:
        zone = rule.tz or f"the hit's {rule.tz_from}"
        text = f"at most {n} per calendar {rule.period} in {zone}"
    elif rule.strategy is Strategy.SLIDING_LOG:
        text = f"at most {n} in any {window}"
    elif rule.strategy is Strategy.FIXED_WINDOW:
        text = f"at most {n} per aligned {window} (up to {2 * n} across two windows' edge)"
    elif rule.strategy is Strategy.ROLLING_WINDOW:
        grain = _window(Rate(1, timedelta(microseconds=rolling_window.grain(rule.rate.window_us))))
        grain = grain if grain[0].isdigit() else f"1 {grain}"
        text = f"at most {n} in any {window} (a unit counts up to {grain} longer than exactly: "
        text += f"{rolling_window.SUB_WINDOWS} sub-windows)"
    elif rule.strategy is Strategy.CONCURRENCY:
        calls = "call" if n == 1 else "calls"
        lease = window if window[0].isdigit() else f"1 {window}"
        text = f"at most {n} {calls} in flight, each lease freed after {lease} at the latest"
    elif rule.capacity == 1:  # a strict rate: each call its own turn
        every_us = -(-rule.rate.window_us // n)  # seconds from one: {:g} would say 3.6e+06 ms
        every = f"{every_us / 1000:g} ms" if every_us < 1_000_000 else f"{every_us / 1e6:.15g} s"
        text = f"{n} per {window}, one every {every}, no burst ({rule.strategy.value})"
    else:
        text = f"{n} per {window}, bursts of up to {rule.capacity} ({rule.strategy.value})"
    if rule.only is not None:
        text += f"; only {', '.join(rule.only)}"
    if rule.caps:
        text += "; " + ", ".join(f"{p} stops at {cap}" for p, cap in rule.caps)
    return text + ("; shadow: never blocks" if rule.shadow else "")


def _window(rate: Rate) -> str:
    seconds = rate.window_seconds
    for unit, size in (("hour", 3_600), ("minute", 60), ("second", 1)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return unit if count == 1 else f"{count} {unit}s"
    return f"{seconds:g} seconds"
