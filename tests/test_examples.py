"""The examples run (the web ones are exercised in test_http_integrations)."""

from __future__ import annotations

from examples import sms_worker, vendor_throttle
from freqguard import Guard, ManualClock, MemoryBackend
from tests.servers import RedisServer


def test_sms_worker_caps_and_refunds(clock: ManualClock) -> None:
    messages = [sms_worker.Message("+15550001", "Your code is 1") for _ in range(5)]
    messages += [sms_worker.Message("+15550001", f"news {n}") for n in range(20)]
    counts = sms_worker.work(Guard(MemoryBackend(), [sms_worker.POLICY], clock=clock), messages)
    # 15/minute for the recipient; a failed send is refunded, so its slot is used again
    assert counts["sent"] == 15
    assert counts["capped"] == 25 - 15 - counts["failed"]


def test_vendor_throttle_threads_never_exceed_the_vendor_limit() -> None:
    clock = ManualClock(1_000)
    times = vendor_throttle.run(None, workers=3, pushes=30, clock=clock)
    assert len(times) == 90
    # GCRA, burst 20 at 20/s: within any [a, b] at most 20 + 20 * (b - a) pushes
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= 20 + 20 * (times[j] - start) + 1e-6


def test_vendor_throttle_processes_share_the_limit_through_redis(redis_server: RedisServer) -> None:
    redis_server.client.flushall()
    # no waiting (timeout 0): a push goes out only if its turn has come. Across three
    # processes that is the burst of 20, plus what refilled (20/s) while they ran, never more
    times = vendor_throttle.run(redis_server.url, workers=3, pushes=10, timeout=0)
    assert 20 <= len(times) <= 20 + 20 * (times[-1] - times[0]) + 1
    assert len(times) < 30  # and some did not get their turn
