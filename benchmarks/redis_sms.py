"""The four-rule SMS policy on Redis: freqguard vs limits vs a per-rule ZSET script.

    python -m benchmarks.redis_sms [--messages 200000] [--throughput 30000]

Starts its own redis-server (and a 3-master cluster) on free loopback ports and replays the
seeded stream (Zipf recipients over 1,000,000 ids, 20 contents) through:

* freqguard with each strategy: one FCALL per message decides all four rules;
* limits (``MovingWindowRateLimiter`` on ``RedisStorage``), the four items hit one by one;
* a reference script in the style of the design document: a sorted set per rule,
  ``ZREMRANGEBYSCORE``/``ZCARD``/``ZADD``, one EVALSHA per rule (four per message).

Reported: server execution µs per decision (``INFO commandstats``), ``used_memory`` per
distinct recipient after the stream, and client throughput: sequential sync, asyncio with 32
tasks, and ``hit_many`` batches, on standalone and on the cluster, against a bare EVALSHA
round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from benchmarks.workload import BY, RULES, limits_decider, sms_stream
from freqguard import AsyncGuard, Guard, Policy, Rate, Rule, Strategy
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.servers import RedisServer, cluster, standalone

Stream = list[tuple[str, str]]

ZSET_SCRIPT = """
-- KEYS[1] the rule's sorted set; ARGV: now_ms, window_ms, limit, member
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], window)
return 1
"""


def sms_policy(strategy: Strategy) -> Policy:
    return Policy(
        "sms",
        *(
            Rule(Rate(limit, timedelta(seconds=window)), by=by, strategy=strategy, name=f"r{i}")
            for i, ((limit, window), by) in enumerate(zip(RULES, BY, strict=True))
        ),
    )


def freqguard_decider(
    client: Redis | RedisCluster, strategy: Strategy
) -> Callable[[str, str], bool]:
    guard = Guard(RedisBackend(client), [sms_policy(strategy)])

    def decide(recipient: str, content: str) -> bool:
        return guard.hit("sms", recipient=recipient, content=content).allowed

    return decide


def limits_redis_decider(url: str) -> Callable[[str, str], bool]:
    from limits import storage

    return limits_decider(storage.RedisStorage(url))


def zset_decider(client: Redis) -> Callable[[str, str], bool]:
    script = client.register_script(ZSET_SCRIPT)
    counter = iter(range(10**12))

    def decide(recipient: str, content: str) -> bool:
        now = int(time.time() * 1000)
        member = str(next(counter))
        ok = True
        for i, (limit, window) in enumerate(RULES):
            key = f"z:{i}:{{{recipient}}}" + (f":{content}" if i >= 2 else "")
            ok = bool(script(keys=[key], args=[now, window * 1000, limit, member])) and ok
        return ok

    return decide


def measure_server(
    server: RedisServer, decide: Callable[[str, str], bool], stream: Stream
) -> dict[str, float]:
    client = server.client
    before_memory = int(client.info("memory")["used_memory"])
    client.config_resetstat()
    start = time.perf_counter()
    admitted = sum(1 for r, c in stream if decide(r, c))
    elapsed = time.perf_counter() - start
    stats = client.info("commandstats")
    # Commands a script calls are counted too, inside the script's own time: count only what
    # the client sent (every library here decides through EVALSHA or FCALL).
    usec = sum(
        int(v["usec"])
        for k, v in stats.items()
        if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")
    )
    used = int(client.info("memory")["used_memory"]) - before_memory
    recipients = len({r for r, _ in stream})
    return {
        "server_us": usec / len(stream),
        "bytes_per_recipient": used / recipients,
        "decisions_per_s": len(stream) / elapsed,
        "admitted": admitted,
    }


def bare_evalsha_rate(client: Redis, n: int) -> float:
    sha = client.script_load("return 1")
    start = time.perf_counter()
    for i in range(n):
        client.evalsha(sha, 1, f"k{i % 1000}")
    return n / (time.perf_counter() - start)


def raw_evalsha_rate(client: Redis, n: int) -> float:
    """The same EVALSHA on a pooled connection, packed once and read by the connection's
    parser, bypassing ``execute_command``: the floor of any redis-py round trip."""
    sha = client.script_load("return 1")
    connection = client.connection_pool.get_connection()
    pack = connection.pack_command
    packed = [pack("EVALSHA", sha, 1, f"k{i}") for i in range(1000)]  # type: ignore[no-untyped-call]
    start = time.perf_counter()
    for i in range(n):
        connection.send_packed_command(packed[i % 1000])  # type: ignore[no-untyped-call]
        connection.read_response()
    elapsed = time.perf_counter() - start
    client.connection_pool.release(connection)
    return n / elapsed


def async_bare_evalsha_rate(port: int, n: int, tasks: int = 32) -> float:
    async def run() -> float:
        client = AsyncRedis(port=port)
        sha = await client.script_load("return 1")

        async def worker(k: int) -> None:
            for i in range(n // tasks):
                await client.evalsha(sha, 1, f"k{k}:{i % 100}")

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(tasks)))
        elapsed = time.perf_counter() - start
        await client.aclose()
        return n // tasks * tasks / elapsed

    return asyncio.run(run())


def sync_rate(client: Redis | RedisCluster, stream: Stream) -> float:
    decide = freqguard_decider(client, Strategy.SLIDING_LOG)
    start = time.perf_counter()
    for r, c in stream:
        decide(r, c)
    return len(stream) / (time.perf_counter() - start)


def many_rate(client: Redis | RedisCluster, stream: Stream, batch: int = 200) -> float:
    guard = Guard(RedisBackend(client), [sms_policy(Strategy.SLIDING_LOG)])
    contexts = [{"recipient": r, "content": c} for r, c in stream]
    start = time.perf_counter()
    for i in range(0, len(contexts), batch):
        guard.hit_many("sms", contexts[i : i + batch])
    return len(stream) / (time.perf_counter() - start)


def async_rate(client: AsyncRedis | AsyncRedisCluster, stream: Stream, tasks: int = 32) -> float:
    async def run() -> float:
        guard = AsyncGuard(AsyncRedisBackend(client), [sms_policy(Strategy.SLIDING_LOG)])

        async def worker(part: Stream) -> None:
            for r, c in part:
                await guard.hit("sms", recipient=r, content=c)

        await guard.hit("sms", recipient="warm", content="up")
        start = time.perf_counter()
        await asyncio.gather(*(worker(stream[i::tasks]) for i in range(tasks)))
        elapsed = time.perf_counter() - start
        await guard.aclose()
        return len(stream) / elapsed

    return asyncio.run(run())


def cluster_pipeline_evalsha(nodes: list[RedisServer]) -> str:
    """How redis-py's own ClusterPipeline handles EVALSHA (older versions asked every node
    COMMAND GETKEYS per call; freqguard builds its own per-node pipelines either way)."""
    client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    sha = client.script_load("return 1")
    for node in nodes:
        node.client.config_resetstat()
    try:
        pipe = client.pipeline()  # type: ignore[no-untyped-call]
        for i in range(300):
            pipe.evalsha(sha, 1, f"k{i}")
        pipe.execute()
    except Exception as exc:  # redis-py 8 refuses EVALSHA in cluster pipelines
        return f"refused ({type(exc).__name__})"
    finally:
        client.close()
    getkeys = sum(
        int(node.client.info("commandstats").get("cmdstat_command|getkeys", {}).get("calls", 0))
        for node in nodes
    )
    return f"{getkeys / 300:.2f} COMMAND GETKEYS per EVALSHA"


def cluster_fcall_getkeys(nodes: list[RedisServer]) -> str:
    """How many COMMAND GETKEYS round trips redis-py's RedisCluster adds per FCALL (it cannot
    find an FCALL's keys by itself; freqguard routes calls to their node instead)."""
    client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    client.function_load(
        "#!lua name=fgbench\nredis.register_function('fgbench', function() return 1 end)",
        replace=True,
    )
    for node in nodes:
        node.client.config_resetstat()
    for i in range(300):
        client.fcall("fgbench", 1, f"k{i}")
    client.close()
    getkeys = sum(
        int(node.client.info("commandstats").get("cmdstat_command|getkeys", {}).get("calls", 0))
        for node in nodes
    )
    return f"{getkeys / 300:.2f} COMMAND GETKEYS per FCALL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000, help="for server time and memory")
    parser.add_argument(
        "--throughput", type=int, default=30_000, help="messages per throughput run"
    )
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    short = stream[: args.throughput]
    workdir = Path(tempfile.mkdtemp(prefix="fg-bench-"))
    print(
        f"{args.messages} messages (Zipf over 1,000,000 ids, 20 contents), "
        f"{len({r for r, _ in stream}):,} distinct recipients\n"
    )

    with standalone(workdir) as server:
        rows: dict[str, dict[str, float]] = {}
        client = Redis(port=server.port)
        for strategy in Strategy:
            server.client.flushall()
            rows[f"freqguard {strategy.value}"] = measure_server(
                server, freqguard_decider(client, strategy), stream
            )
        server.client.flushall()
        rows["limits moving-window"] = measure_server(
            server, limits_redis_decider(server.url), stream
        )
        server.client.flushall()
        rows["zset script per rule"] = measure_server(server, zset_decider(client), stream)
        print("Server side, standalone (whole stream):")
        heads = ("server µs/decision", "bytes/recipient", "decisions/s", "admitted")
        print(f"{'':<26}{heads[0]:>20}{heads[1]:>17}{heads[2]:>13}{heads[3]:>10}")
        for name, row in rows.items():
            print(
                f"{name:<26}{row['server_us']:>20.2f}{row['bytes_per_recipient']:>17.0f}"
                f"{row['decisions_per_s']:>13,.0f}{row['admitted']:>10,.0f}"
            )
        sl, lim, ref = (
            rows["freqguard sliding-log"],
            rows["limits moving-window"],
            rows["zset script per rule"],
        )
        print(
            f"\nsliding-log vs limits: server time {sl['server_us'] / lim['server_us']:.3f}x, "
            f"memory {sl['bytes_per_recipient'] / lim['bytes_per_recipient']:.3f}x, "
            f"throughput {sl['decisions_per_s'] / lim['decisions_per_s']:.2f}x"
        )
        print(
            f"sliding-log vs zset script: server time {sl['server_us'] / ref['server_us']:.3f}x, "
            f"memory {sl['bytes_per_recipient'] / ref['bytes_per_recipient']:.3f}x"
        )

        server.client.flushall()
        bare = bare_evalsha_rate(client, args.throughput)
        raw = raw_evalsha_rate(client, args.throughput)
        bare_async = async_bare_evalsha_rate(server.port, args.throughput)
        server.client.flushall()
        seq = sync_rate(client, short)
        server.client.flushall()
        asy = async_rate(AsyncRedis(port=server.port), short)
        server.client.flushall()
        many = many_rate(client, short)
        print(f"\nClient throughput, standalone ({args.throughput} messages each):")
        print(f"  bare EVALSHA round trip      {bare:>10,.0f}/s  (redis-py execute_command)")
        print(f"  raw EVALSHA round trip       {raw:>10,.0f}/s  (packed once, on the connection)")
        print(f"  bare EVALSHA, 32 async tasks {bare_async:>10,.0f}/s  (redis.asyncio)")
        print(
            f"  freqguard sync sequential    {seq:>10,.0f}/s  "
            f"({seq / bare:.0%} of bare EVALSHA, {seq / raw:.0%} of raw)"
        )
        print(
            f"  freqguard asyncio, 32 tasks  {asy:>10,.0f}/s  ({asy / bare_async:.2f}x bare async)"
        )
        print(f"  freqguard hit_many (200)     {many:>10,.0f}/s  ({many / seq:.1f}x sequential)")
        client.close()

    with cluster(workdir / "cluster") as nodes:
        client_c = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        seq_c = sync_rate(client_c, short)
        asy_c = async_rate(AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port), short)
        many_c = many_rate(client_c, short)
        print(f"\nClient throughput, 3-master cluster ({args.throughput} messages each):")
        print(f"  freqguard sync sequential    {seq_c:>10,.0f}/s")
        print(f"  freqguard asyncio, 32 tasks  {asy_c:>10,.0f}/s")
        print(
            f"  freqguard hit_many (200)     {many_c:>10,.0f}/s  ({many_c / seq_c:.1f}x sequential)"
        )
        print(f"\nredis-py's own ClusterPipeline with EVALSHA: {cluster_pipeline_evalsha(nodes)}")
        print(f"redis-py's RedisCluster.fcall: {cluster_fcall_getkeys(nodes)}")
        client_c.close()


if __name__ == "__main__":
    main()
