"""A guard's settings, checked at construction, and what its components are made from: the time
its calls are made at (:class:`Now`) and what the async face of a sync guard shares with it
(:class:`Shared`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Protocol

from freqguard.bounds import check_time
from freqguard.clock import Clock, check_clock
from freqguard.engine.breaker import Breaker
from freqguard.engine.denials import Denials
from freqguard.engine.failover import Failover
from freqguard.engine.registry import PolicyRegistry
from freqguard.errors import ConfigError, shown
from freqguard.observe.base import Observer
from freqguard.policy import Policy

__all__ = [
    "DEFAULT_BREAKER",
    "PEER_METHODS",
    "Now",
    "PeerHabits",
    "Shared",
    "Sharing",
    "check_backend",
    "check_breaker",
    "check_observers",
    "check_policies",
    "shortened",
]

DEFAULT_BREAKER: Any = object()  # "a new Breaker()": a default argument must not be shared


def check_backend(guard: str, backend: object, methods: tuple[str, ...]) -> None:
    """Refuse, at construction, a backend the guard could not drive: the alternative is an
    AttributeError at the first hit, far from the mistake."""
    if all(callable(getattr(backend, name, None)) for name in methods) and hasattr(
        backend, "clock"
    ):
        return
    if isinstance(backend, (list, tuple)) and backend and isinstance(backend[0], Policy):
        got = f"a {type(backend).__name__} of policies: pass policies=[...]"
    elif isinstance(backend, Policy):
        got = "a Policy: pass policies=[...]"
    elif isinstance(backend, str):
        maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
        got = f"the string {shown(backend)}: pass {maker}({shown(backend)})"
    elif type(backend).__module__.startswith(("limits.storage", "limits.aio.storage")):
        maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
        got = (  # limits' MemoryStorage(), or limits.aio's
            f"limits' storage {type(backend).__name__}: freqguard's backends are "
            f"MemoryBackend() and {maker}('redis://...')"
        )
    else:
        got = shown(backend)
        other = "AsyncGuard" if guard == "Guard" else "Guard"
        theirs = ("aexecute", "aexecute_many") if guard == "Guard" else ("execute", "execute_many")
        if all(callable(getattr(backend, name, None)) for name in theirs):
            # the hint first: a client's repr can run to hundreds of characters
            maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
            got = (
                f"{type(backend).__name__}, which serves {other}, not {guard} (from a URL: "
                f"{maker}; {got})"
            )
    kind = "a sync" if guard == "Guard" else "an async"
    raise TypeError(
        f"{guard} needs {kind} backend (with {', '.join(methods)} and clock) as its first "
        f"argument, got {got}"
    )


def shortened(text: str, most: int = 80) -> str:
    """``text`` cut to ``most`` characters, "..." saying so (a value shown in a message)."""
    return text if len(text) <= most else text[: most - 3] + "..."


def check_policies(policies: Iterable[Policy]) -> Iterable[Policy]:
    """``policies``, unless it is one policy where a list of them belongs."""
    if isinstance(policies, Policy):
        raise TypeError(
            f"policies takes a list of policies: pass policies=[policy], got {shown(policies)}"
        )
    if not isinstance(policies, Iterable):
        raise TypeError(f"policies takes a list of policies, got {shown(policies)}")
    return policies


def check_breaker(breaker: object) -> Breaker | None:
    """The guard's breaker: a new :class:`Breaker` for :data:`DEFAULT_BREAKER`, the one
    given, or None (none)."""
    if breaker is DEFAULT_BREAKER:
        return Breaker()
    if breaker is not None and not isinstance(breaker, Breaker):
        raise ConfigError(f"breaker must be a Breaker or None, got {shown(breaker)}")
    return breaker


def check_observers(observers: Iterable[Observer]) -> tuple[Observer, ...]:
    """The observers, each checked to be one."""
    if isinstance(observers, Observer) or not isinstance(observers, Iterable):
        raise TypeError(f"observers takes a list: pass observers=[{shown(observers)}]")
    checked = tuple(observers)
    for observer in checked:
        if not isinstance(observer, Observer):
            raise TypeError(f"observers must have decided() and failed(), got {shown(observer)}")
    return checked


class Now:
    """The time a guard's calls are made at, in µs: its clock's when it pins one, else None
    (the store decides on its own time). ``clock`` may be replaced while the guard runs."""

    __slots__ = ("clock",)

    def __init__(self, clock: Clock | None) -> None:
        self.clock = check_clock(clock, "Guard(clock=...)")

    def __call__(self) -> int | None:
        clock = self.clock
        return None if clock is None else check_time(clock.now_us())


class Shared(NamedTuple):
    """What the async face of a sync guard shares with it, not copies: a policy added to
    either, now or later, is known to both, and one breaker, deny cache and set of
    observers serve both."""

    policies: PolicyRegistry
    failover: Failover
    denials: Denials
    breaker: Breaker | None
    observers: tuple[Observer, ...]


class Sharing(Protocol):
    """A guard whose parts a face can share (:class:`Shared`)."""

    def _shared(self) -> Shared: ...


#: What people coming from a peer call a guard, and freqguard's way (an AttributeError
#: naming it, where Python's would name nothing).
PEER_METHODS = {
    "test": "limits' test(item, key) is peek(policy, **context).allowed (it counts nothing)",
    "get_window_stats": "limits' get_window_stats(item, key) is peek(policy, **context): "
    ".remaining, and .reset_after in seconds from now",
    "clear": "limits' clear(item, key) is reset(policy, **context)",
    "limit": "Flask-Limiter's and slowapi's limit() is @capped(...) (freqguard.decorators), "
    "or an integration's Limit; throttled-py's limit(key) is hit(policy, **context)",
    "shared_limit": "a budget shared by routes is one policy name given to each cap",
}


class PeerHabits:
    """A guard's answer to a peer's method name: an AttributeError naming freqguard's way
    (``docs/coming-from/``)."""

    if not TYPE_CHECKING:  # mypy keeps refusing unknown attributes itself

        def __getattr__(self, name: str) -> NoReturn:
            hint = PEER_METHODS.get(name)
            message = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(message if hint is None else f"{message}: {hint}")
