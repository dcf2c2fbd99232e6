"""Guard and AsyncGuard: the engine every operation goes through.

Both drive the same I/O-free operations (:mod:`freqguard.engine`); ``AsyncGuard`` is written
once (``freqguard/_async/guard.py``) and ``Guard`` generated from it.
"""

from freqguard._async.guard import AsyncGuard
from freqguard._sync.guard import Guard
from freqguard.errors import ConfigError, shown
from freqguard.policy import Policy

__all__ = ["AsyncGuard", "Guard", "not_a_guard"]


def not_a_guard(value: object, where: str, takes: str = "a Guard or an AsyncGuard") -> ConfigError:
    """The error for ``value`` given to ``where`` (``FreqGuardMiddleware``) as its
    ``guard=``, which ``takes`` what it says, naming the fix for what was given: a backend,
    a URL, a policy, a guard of the other face."""
    kind = type(value).__name__
    if isinstance(value, (Guard, AsyncGuard)):
        fix = f"its calls are {'awaited' if isinstance(value, AsyncGuard) else 'not awaited'}"
    elif hasattr(value, "execute") and hasattr(value, "clock"):  # a backend
        fix = f"a backend is not a guard: Guard({kind}(...), policies) makes one"
    elif isinstance(value, str):
        fix = f"a URL is not a guard: Guard(backend_from_url({value[:60]!r})) makes one"
    elif isinstance(value, Policy):
        fix = "a policy goes to the guard: Guard(backend, [policy])"
    else:
        fix = f"got {shown(value, 60)}"
    return ConfigError(f"{where}: guard= takes {takes}, not {kind} ({fix})", argument="guard")
