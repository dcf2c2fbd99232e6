"""``/readyz``: whether the service can decide (``/healthz``: the process answers). A probe
peeks at a policy of its own on the guard's store, as ``freqguard ping`` does: it writes
nothing, loads the store's function where it is missing, and has no circuit breaker, so a
store that came back is seen at once.
"""

from __future__ import annotations

import asyncio

import freqguard.service.schema as schema
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.guard import AsyncGuard
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.service.problems import Problem, log

__all__ = ["PROBE", "READY_TIMEOUT", "Readiness"]

#: The probe's policy (no count of it is ever kept: a peek only reads).
PROBE = "freqguard-ready"
READY_TIMEOUT = 2.0  # seconds the store has to answer the probe


class Readiness:
    """The probe of one guard's store."""

    def __init__(self, guard: AsyncGuard, timeout: float = READY_TIMEOUT) -> None:
        probe = Policy(PROBE, Rule("1/second", name="probe"))
        self._probe = AsyncGuard(guard.backend, [probe], prefix=guard.prefix, breaker=None)
        self.timeout, self._store = timeout, type(guard.backend).__name__

    async def check(self) -> schema.Ready:
        """Ready, if the store answered the probe in time.

        Raises:
            Problem: 503, saying whether the store failed or was too slow (what it said
                goes to the log, as for any call).
        """
        try:
            await asyncio.wait_for(self._probe.peek(PROBE), self.timeout)
        except asyncio.TimeoutError:
            detail = f"the store did not answer within {self.timeout:g} s"
        except (BackendUnavailable, ConfigError) as exc:  # ConfigError: a node's MOVED
            log.warning("freqguard serve: /readyz: %s", exc)
            detail = "the store could not be reached or refused the probe"
        else:
            return schema.Ready(status="ready", store=self._store)
        raise Problem(503, f"not ready: {detail}", headers={"retry-after": "1"})
