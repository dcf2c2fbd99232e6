"""The examples run (the web ones are exercised in test_http_integrations).

Nothing here depends on how fast the machine is: the threads run on a pinned clock, and the
Redis runs assert the rule's guarantee in the limiter's own time (the server's, or pinned),
which holds however the processes are scheduled.
"""

from __future__ import annotations

from examples import sms_worker, vendor_throttle
from freqguard import Guard, ManualClock, MemoryBackend
from tests.conftest import START
from tests.servers import RedisServer

BURST, INTERVAL_US = vendor_throttle.RULE.capacity, vendor_throttle.INTERVAL_US


def test_sms_worker_caps_and_refunds(clock: ManualClock) -> None:
    messages = [sms_worker.Message("+15550001", "Your code is 1") for _ in range(5)]
    messages += [sms_worker.Message("+15550001", f"news {n}") for n in range(20)]
    tally = sms_worker.work(Guard(MemoryBackend(), [sms_worker.POLICY], clock=clock), messages)
    # 15/minute for the recipient; a failed send is refunded, so its slot is used again
    assert tally.sent == 15
    assert tally.capped == 25 - 15 - tally.failed
    assert tally.capped_by["rcpt-1m"] == 25 - 15 - tally.failed - 3
    assert tally.capped_by["content-59s"] == 3  # "Your code is 1" a third, fourth, fifth time


def test_sms_worker_prints_a_readable_summary() -> None:
    tally = sms_worker.Tally(sent=15, failed=1, capped=9)
    tally.capped_by.update({"rcpt-1m": 6, "content-59s": 3})
    assert str(tally).splitlines() == [
        "25 messages: 15 sent, 9 capped, 1 failed at the vendor (refunded, so they used up no cap)",
        "capped by (a message may be capped by several rules):",
        "  rcpt-1m          6",
        "  content-59s      3",
    ]


def _within_the_guarantee(times_us: list[int]) -> None:
    """In any interval [a, b] at most burst + (b - a) / T pushes (docs/strategies/gcra.md)."""
    for i, start in enumerate(times_us):
        for j in range(i, len(times_us)):
            assert (j - i + 1 - BURST) * INTERVAL_US <= times_us[j] - start, (i, j)


def test_vendor_throttle_threads_never_exceed_the_vendor_limit() -> None:
    times = vendor_throttle.run(None, workers=3, pushes=30, clock=ManualClock(1_000))
    assert len(times) == 90  # each waited for its turn
    _within_the_guarantee(times)


def test_vendor_throttle_processes_never_exceed_the_guarantee_on_the_servers_clock(
    redis_server: RedisServer,
) -> None:
    redis_server.client.flushall()
    # no waiting (timeout 0): a push goes out only if its turn has come. How many do depends
    # on how fast the processes run; the guarantee, in the server's time, does not
    times = vendor_throttle.run(redis_server.url, workers=3, pushes=10, timeout=0)
    assert len(times) >= BURST  # a push is refused only once the burst is used up
    _within_the_guarantee(times)


def test_vendor_throttle_processes_share_one_limit_through_redis(redis_server: RedisServer) -> None:
    redis_server.client.flushall()
    # every process pinned to the same instant: together they get one burst, no more
    times = vendor_throttle.run(
        redis_server.url, workers=3, pushes=10, clock=ManualClock(START), timeout=0
    )
    assert times == [round(START * 1_000_000)] * BURST


def test_vendor_throttle_summary_shows_the_burst_and_the_sustained_rate() -> None:
    times = [0] * BURST + [k * INTERVAL_US for k in range(1, 11)]
    assert vendor_throttle.summary(times).splitlines() == [
        "30 pushes admitted",
        "  burst: the first 20 within 0.0 ms (the rule allows 20 at once)",
        "  then: 10 more in 0.50s = 20.0/s (limit 20/s)",
        "  guarantee: in any t seconds at most 20 + 20*t pushes",
    ]
