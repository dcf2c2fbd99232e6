"""Where a recipient's bytes go in Redis: the SMS policy's records, taken apart.

    python -m benchmarks.record_bytes [--messages 200000]

Starts its own redis-server on a free loopback port, replays the seeded SMS stream (Zipf
over 1,000,000 ids, 20 contents; ``benchmarks.workload``) through the four-rule policy with
each strategy, on the server's time, and reports per distinct recipient:

* ``used_memory`` growth (what the server really spends, allocator and dict overhead in);
* what the records hold: the key name, the field names (a 3-byte tag, plus an 8-byte digest
  for the content's states), the field heads (expiry and latest write, 14 bytes a state),
  the states themselves and the meta field;
* the server's time a decision (``INFO commandstats``: FCALL's µs a call, one call at a
  time, so read it as ±25 % between cases; a check that the smaller states cost no time);
* the rest: Redis's own overhead (the key's dict entries, objects, the listpack framing and
  the allocator's size classes), and how many records Redis holds as a hashtable instead of
  a listpack, because one value passed ``hash-max-listpack-value`` (64 bytes by default).

The sliding log runs twice: with Redis's default ``hash-max-listpack-value`` and with 512,
an operator's setting that keeps a busy recipient's day log (up to 50 entries of 5 bytes)
in the compact encoding.

With ``--before``, each case also runs on the policy function of commit c95719d
(``tests/fixtures/policy-0.2-full.lua``: every state in full, before states were stored
short), loaded under this release's function name as a deploy would, and the table shows
both, before then after, from one run.

With ``--bins PER``, each case also runs with the records shared in bins
(``RedisBackend(bins=N)``, N = recipients / PER), the server set as docs/redis.md
advises (``hash-max-listpack-value 4096``, or ``--bin-value``; ``hash-max-listpack-entries
256``); a binned
record is one string, so its column shows the records' bytes (``states``: ids and strings)
and the bins' own (``key name``: the bin's key and meta field, shared out), and
``records held as a hashtable`` counts bins.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import Guard, Strategy
from freqguard.backends._library import FUNCTION
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import FIELD_HEAD, RECORD_META, widths
from tests.servers import RedisServer, standalone

HEAD = sum(widths(FIELD_HEAD))
META = sum(widths(RECORD_META))
BEFORE = Path(__file__).parents[1] / "tests" / "fixtures" / "policy-0.2-full.lua"
CASES = [
    (Strategy.SLIDING_LOG, 64),
    (Strategy.SLIDING_LOG, 512),
    (Strategy.FIXED_WINDOW, 64),
    (Strategy.TOKEN_BUCKET, 64),
    (Strategy.GCRA, 64),
]


def one_case(
    server: RedisServer,
    stream: list[tuple[str, str]],
    strategy: Strategy,
    listpack: int,
    code: str | None = None,
    bins: int = 0,
    bin_value: int = 4096,
) -> dict[str, float]:
    """One strategy's records taken apart; with ``code``, written by that policy function;
    with ``bins``, shared in that many bins."""
    client = server.client
    client.flushall()
    client.function_flush()  # functions outlive FLUSHALL: the case before may have left one
    client.config_set("hash-max-listpack-value", bin_value if bins else listpack)
    client.config_set("hash-max-listpack-entries", 256 if bins else 128)
    backend = RedisBackend(Redis(port=server.port), bins=bins)
    guard = Guard(backend, [sms_policy(strategy)])
    guard.hit("sms", recipient="warm", content="up")  # the function loaded
    if code is not None:  # in its place, as a deploy does
        client.function_load(code.replace("__LIBRARY__", FUNCTION), replace=True)
    client.delete(*client.keys("*"))
    before = int(client.info("memory")["used_memory"])
    client.config_resetstat()
    for recipient, content in stream:
        guard.hit("sms", recipient=recipient, content=content)
    used = int(client.info("memory")["used_memory"]) - before
    fcall = client.info("commandstats")["cmdstat_fcall"]
    keys = client.keys("*")
    if bins:
        return _binned(client, keys, used, fcall, guard)
    parts: Counter[str] = Counter()
    for key in keys:
        record = client.hgetall(key)
        parts["key name"] += len(key)
        parts["field names"] += sum(len(field) for field in record if field)
        parts["meta field"] += 1 + len(record.get(b"", b""))  # its name is empty
        states = [value for field, value in record.items() if field]
        parts["field heads"] += HEAD * len(states)
        parts["states"] += sum(len(value) - HEAD for value in states)
        parts["states a record"] += len(states)
        if client.object("encoding", key) == b"hashtable":
            parts["hashtable records"] += 1
    recipients = len(keys)
    out = {name: count / recipients for name, count in parts.items()}
    out["hashtable records"] = 100 * parts["hashtable records"] / recipients  # %
    out["used_memory"] = used / recipients
    held = sum(out[n] for n in ("key name", "field names", "meta field", "field heads", "states"))
    out["held"] = held
    out["redis overhead"] = out["used_memory"] - held
    out["server us"] = int(fcall["usec"]) / int(fcall["calls"])
    guard.close()
    return out


def _binned(
    client: Redis, keys: list[Any], used: int, fcall: dict[str, str], guard: Guard
) -> dict[str, float]:
    """A binned case's bytes: each record an id and a string in a shared hash."""
    parts: Counter[str] = Counter()
    for key in keys:
        binned = client.hgetall(key)
        parts["key name"] += len(key) + 1 + len(binned.get(b"", b""))  # the bin's own
        records = {rid: blob for rid, blob in binned.items() if rid}
        parts["states"] += sum(len(rid) + len(blob) for rid, blob in records.items())
        parts["recipients"] += len(records)
        if client.object("encoding", key) == b"hashtable":
            parts["hashtable records"] += 1
    recipients = parts.pop("recipients")
    out = {name: count / recipients for name, count in parts.items()}
    out["hashtable records"] = 100 * parts["hashtable records"] / len(keys)  # % of bins
    out["used_memory"] = used / recipients
    out["held"] = out["key name"] + out["states"]
    out["redis overhead"] = out["used_memory"] - out["held"]
    out["server us"] = int(fcall["usec"]) / int(fcall["calls"])
    guard.close()
    return out


ROWS = [
    ("used_memory", "used_memory growth"),
    ("key name", "key name"),
    ("field names", "field names"),
    ("meta field", f"meta field ({META} bytes + limits)"),
    ("field heads", f"field heads ({HEAD} bytes a state)"),
    ("states", "states"),
    ("redis overhead", "Redis's own overhead"),
    ("states a record", "states a record"),
    ("hashtable records", "records held as a hashtable, %"),
    ("server us", "server µs a decision (FCALL, commandstats)"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--before", action="store_true", help="also the c95719d function")
    parser.add_argument("--bins", type=int, default=0, help="also binned, PER a bin")
    parser.add_argument("--bin-value", type=int, default=4096, help="its listpack value")
    parser.add_argument("--only", default="", help="these strategies only (comma-separated)")
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    recipients = len({r for r, _ in stream})
    codes: list[tuple[str, str | None, int]] = [("", None, 0)]
    if args.before:
        codes = [(", before", BEFORE.read_text(encoding="utf-8"), 0), (", after", None, 0)]
    if args.bins:
        codes.append((", binned", None, max(1, recipients // args.bins)))
    results, heads = [], []
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        for s, lp in CASES:
            if args.only and s.value not in args.only.split(","):
                continue
            for when, code, bins in codes:
                if bins and lp != 64:
                    continue  # the binned case sets its own listpack limits
                results.append(one_case(server, stream, s, lp, code, bins, args.bin_value))
                name = f"{s.value} ({lp})" if s is Strategy.SLIDING_LOG else s.value
                heads.append(name + when)
    print(f"{args.messages} messages, {recipients} recipients; bytes per recipient\n")
    print("| | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    for key, label in ROWS:
        print(f"| {label} | " + " | ".join(f"{r.get(key, 0):.1f}" for r in results) + " |")


if __name__ == "__main__":
    main()
