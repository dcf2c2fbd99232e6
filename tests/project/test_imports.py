"""What importing freqguard loads, seen from a fresh interpreter: a plain import stays cheap
and needs none of the extras; ``import *`` works without them; and what mypy makes of the
async guard's answers (a mypy run: slow)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def test_importing_freqguard_does_not_load_the_decorator_or_an_extra() -> None:
    """``capped``, the Redis backends and the metrics observers load on first use: a plain
    import stays cheap, and needs none of the extras."""
    code = (
        "import sys, freqguard; "
        "print(sorted(m for m in ('freqguard.decorators', 'freqguard.decorators.defaults', "
        "'redis', 'prometheus_client', 'opentelemetry') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_import_star_works_without_the_extras() -> None:
    """``from freqguard import *`` imports every name in ``__all__``: those that need an
    extra are listed only when it is installed."""
    code = (
        "import sys\n"
        "for extra in ('redis', 'prometheus_client', 'opentelemetry'):\n"
        "    sys.modules[extra] = None  # as if not installed\n"
        "from freqguard import *\n"
        "print(sorted(n for n in ('RedisBackend', 'PrometheusObserver') if n in dir()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.slow  # a mypy run, ~6 s
def test_mypy_types_the_awaited_answers_and_flags_a_forgotten_await(tmp_path: Path) -> None:
    from mypy import api

    source = tmp_path / "typed.py"
    source.write_text(
        textwrap.dedent(
            """
            import asyncio
            from freqguard import AsyncGuard, Decision, Guard

            async def main(guard: AsyncGuard, sync: Guard) -> None:
                decision: Decision = await guard.hit("sms", recipient="a")
                decisions: list[Decision] = await guard.hit_many("sms", [{"recipient": "a"}])
                peeked: Decision = await guard.peek("sms")
                acquired: Decision = await guard.acquire("sms", timeout=1.0)
                refunded: Decision = await guard.refund(decision)
                task: asyncio.Task[Decision] = asyncio.create_task(guard.hit("sms"))
                same: Decision = sync.hit("sms")
                guard.hit("sms").allowed
            """
        )
    )
    out, _, _ = api.run(
        [str(source), "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "c")]
    )
    # the snippet's own (old mypy and stubs at their floor may find others in the package)
    errors = [
        line for line in out.splitlines() if line.startswith(f"{source}:") and ": error:" in line
    ]
    assert len(errors) == 1, out
    assert errors[0].startswith(f"{source}:13: error:")
    assert '"Pending[Decision]" has no attribute "allowed"' in errors[0]
    assert 'Maybe you forgot to use "await"?' in out
