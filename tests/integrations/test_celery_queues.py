"""What docs/celery.md says beyond capped_task's own tests: its arq snippet, run with a
stand-in for arq, and a failing store retried by Celery's ``autoretry_for``.

arq pins redis-py below 6 and kombu 5.7's Redis broker needs 6.1, so arq is not among the
test dependencies and the docs' snippet runner skips the block. Here it runs with a module
that gives ``arq.Retry`` as arq 0.26-0.28 define it (``defer`` in seconds, kept as
``defer_score`` in ms): the freqguard part (the hit, its ``retry_after``, the refund) is real.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery
from celery.signals import task_retry

from freqguard import BackendUnavailable, Guard, Policy, Rule, backend_from_url
from freqguard.integrations.celery import capped_task
from tests.servers import free_port

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "celery.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


class Retry(Exception):
    """arq.Retry's interface: ``Retry(defer=seconds)``, ``defer_score`` in ms."""

    def __init__(self, defer: float | None = None) -> None:
        super().__init__(defer)
        self.defer_score = None if defer is None else round(defer * 1000)


@pytest.fixture
def arq() -> Iterator[None]:
    stand_in = types.ModuleType("arq")
    stand_in.Retry = Retry  # type: ignore[attr-defined]
    sys.modules["arq"] = stand_in
    yield
    del sys.modules["arq"]


def test_the_arq_snippet_defers_by_retry_after(
    arq: None, capsys: pytest.CaptureFixture[str]
) -> None:
    text = PAGE.read_text()
    blocks = BLOCK.findall(text)
    arq_block = next(i for i, code in enumerate(blocks) if "from arq import Retry" in code)
    module = types.ModuleType("docs_snippet")
    sys.modules[module.__name__] = module
    try:
        for code in blocks[: arq_block + 1]:  # the page's blocks up to it, as a reader reads
            exec(compile(code, str(PAGE), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    printed = capsys.readouterr().out.splitlines()
    assert printed[-3:] == ["sent 'a'", "sent 'b'", "retry in 60.0"]


def test_a_store_that_is_down_fails_the_task_and_autoretry_retries_it() -> None:
    """docs/celery.md: with on_error="raise" the task fails with BackendUnavailable before
    its body, and Celery's autoretry_for retries it within max_retries (a real refused
    connection: a port nothing listens on)."""
    app = Celery("down", set_as_current=False)
    app.conf.task_always_eager = True
    ran: list[str] = []
    retried: list[object] = []

    def count(**signal: object) -> None:
        retried.append(signal["request"])

    with Guard(backend_from_url(f"redis://127.0.0.1:{free_port()}/0"), []) as guard:

        @capped_task(
            app,
            Policy("sms", Rule("2/minute", by="recipient")),
            guard=guard,
            shared=False,
            autoretry_for=(BackendUnavailable,),
            max_retries=2,
            retry_backoff=False,
            default_retry_delay=0,
        )
        def send(recipient: str) -> None:
            ran.append(recipient)

        task_retry.connect(count, weak=False)
        try:
            with pytest.raises(BackendUnavailable):
                send.delay(recipient="+1").get()
        finally:
            task_retry.disconnect(count)
    assert ran == []
    assert len(retried) == 2
