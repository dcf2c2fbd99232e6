"""@capped: every key form, every on_exceeded mode, methods, async, errors, static types."""

from __future__ import annotations

import asyncio
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.decorators import capped, configure


@dataclass
class Message:
    to: str
    body: str


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    return Guard(
        MemoryBackend(), [Policy("sms", Rule("2/minute", by=("recipient", "content")))], clock=clock
    )


def test_parameter_name_key(guard: Guard) -> None:
    @capped("2/minute", key="recipient", guard=guard)
    def send(recipient: str, text: str = "hi") -> str:
        return f"sent to {recipient}"

    assert send("a") == "sent to a"
    assert send(recipient="a", text="x") == "sent to a"
    with pytest.raises(CapExceeded) as caught:
        send("a")
    assert caught.value.decision.retry_after == 60.0
    assert send("b") == "sent to b"


def test_dotted_path_and_mapping_keys_and_policy_names(guard: Guard) -> None:
    @capped("1/minute", key="msg.to", guard=guard)
    def by_path(msg: Message) -> bool:
        return True

    @capped(
        "sms", key={"recipient": "msg.to", "content": lambda msg: msg.body.lower()}, guard=guard
    )
    def by_mapping(msg: Message) -> bool:
        return True

    assert by_path(Message("a", "x"))
    with pytest.raises(CapExceeded):
        by_path(Message("a", "y"))
    assert by_mapping(Message("a", "Hello"))
    assert by_mapping(Message("a", "HELLO"))  # same content once lower-cased
    with pytest.raises(CapExceeded):
        by_mapping(Message("a", "hello"))


def test_a_path_reads_a_property_before_a_mapping_item_of_the_same_name(guard: Guard) -> None:
    """A Starlette Request is a Mapping over its ASGI scope: ``request.client.host`` read the
    scope's ``client`` tuple (no ``host``), and every call failed (found by a new user's
    first hour, slowapi's ``get_remote_address`` written as a path). A property of the
    object's class wins over an item of the same name; a plain mapping's items are read as
    before."""
    from starlette.requests import Request

    @capped("1/minute", key="request.client.host", guard=guard)
    def route(request: Request) -> bool:
        return True

    def request(host: str) -> Request:
        return Request({"type": "http", "client": (host, 5000), "headers": []})

    assert route(request("10.0.0.1"))
    with pytest.raises(CapExceeded):
        route(request("10.0.0.1"))
    assert route(request("10.0.0.2"))

    @capped("1/minute", key="box.keys", guard=guard)  # a dict's item, not its method
    def boxed(box: dict[str, str]) -> bool:
        return True

    assert boxed({"keys": "k1"})
    with pytest.raises(CapExceeded):
        boxed({"keys": "k1"})


def test_callable_key_and_callable_cost(guard: Guard) -> None:
    @capped("10/minute", key=lambda user, n: user.upper(), cost=lambda user, n: n, guard=guard)
    def bulk(user: str, n: int) -> int:
        return n

    assert bulk("u", 6) == 6
    with pytest.raises(CapExceeded):
        bulk("U", 5)  # the same key, 4 left
    assert bulk("u", 4) == 4


def test_on_exceeded_modes(guard: Guard, clock: ManualClock) -> None:
    calls: list[str] = []

    @capped("1/minute", key="k", guard=guard, on_exceeded="skip")
    def skip(k: str) -> str:
        calls.append(k)
        return k

    @capped("1/minute", key="k", guard=guard, on_exceeded=lambda d: f"later {d.retry_after:.0f}")
    def fallback(k: str) -> str:
        return k

    @capped("1/minute", key="k", guard=guard, on_exceeded="wait", timeout=120)
    def wait(k: str) -> str:
        return k

    assert skip("a") == "a"
    assert skip("a") is None
    assert calls == ["a"]
    assert fallback("a") == "a"
    assert fallback("a") == "later 60"
    start = clock.now()
    assert wait("a") == "a"
    assert wait("a") == "a"
    assert clock.now() - start == 60.0  # waited for its turn on the (manual) clock
    with pytest.raises(ConfigError, match="on_exceeded"):
        capped("1/minute", on_exceeded="ignore")  # type: ignore[arg-type]


def test_methods_and_class_methods(guard: Guard) -> None:
    class Sender:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        @capped("1/minute", key="recipient", guard=guard)
        def send(self, recipient: str) -> str:
            return self.prefix + recipient

        @classmethod
        @capped("1/minute", key="recipient", guard=guard)
        def klass(cls, recipient: str) -> str:
            return cls.__name__ + recipient

    sender = Sender(">")
    assert sender.send("a") == ">a"
    with pytest.raises(CapExceeded):
        Sender("?").send("a")  # the cap is per recipient, not per instance
    assert Sender.klass("a") == "Sendera"
    with pytest.raises(CapExceeded):
        Sender.klass("a")


def test_async_functions_with_async_and_sync_guards(clock: ManualClock) -> None:
    aguard = AsyncGuard(MemoryBackend(), clock=clock)
    sguard = Guard(MemoryBackend(), clock=clock)

    @capped("2/minute", key="user", guard=aguard)
    async def with_async(user: str) -> str:
        return user

    @capped("2/minute", key="user", guard=sguard, on_exceeded="wait")
    async def with_sync(user: str) -> str:
        return user

    async def main() -> list[str | None]:
        out: list[str | None] = [await with_async("u"), await with_async("u")]
        try:
            await with_async("u")
        except CapExceeded:
            out.append("denied")
        out += [await with_sync("v") for _ in range(3)]
        return out

    assert asyncio.run(main()) == ["u", "u", "denied", "v", "v", "v"]
    assert clock.now() > 1_700_000_000  # the third with_sync call waited on the clock


def test_wrong_keys_are_reported_clearly(guard: Guard) -> None:
    with pytest.raises(ConfigError, match="names no parameter"):

        @capped("1/minute", key="recipent", guard=guard)
        def typo(recipient: str) -> None: ...

    @capped("1/minute", key="msg.recipient", guard=guard)
    def deep(msg: Message) -> None: ...

    with pytest.raises(ConfigError, match="has no 'recipient'"):
        deep(Message("a", "b"))

    with pytest.raises(ConfigError, match="neither a rate nor a registered policy"):

        @capped("nope", key="k", guard=guard)  # at decoration, not at the first call
        def unknown_policy(k: str) -> None: ...


def test_context_manager_and_default_guard(clock: ManualClock) -> None:
    configure(MemoryBackend(clock))
    with capped("1/minute", context={"user": "u"}) as decision:
        assert isinstance(decision, Decision)
    with pytest.raises(CapExceeded), capped("1/minute", context={"user": "u"}):
        pass

    async def block() -> None:
        async with capped("1/minute", context={"user": "w"}):
            pass

    asyncio.run(block())
    with pytest.raises(ConfigError, match="context"), capped("1/minute"):
        pass


def test_names_docs_and_signatures_survive() -> None:
    @capped("1/minute", key="k")
    def documented(k: str, n: int = 1) -> str:
        """Docs."""
        return k

    import inspect

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docs."

    def plain(k: str, n: int = 1) -> str:
        return k

    assert inspect.signature(documented) == inspect.signature(plain)


@pytest.mark.slow  # a mypy run
def test_mypy_sees_the_original_signature(tmp_path: Path) -> None:
    from mypy import api

    source = tmp_path / "typed.py"
    source.write_text(
        textwrap.dedent(
            """
            from freqguard.decorators import capped

            @capped("1/minute", key="k")
            def f(k: str, n: int = 1) -> str:
                return k

            reveal_type(f)
            f(1)
            """
        )
    )
    out, _, _ = api.run(
        [str(source), "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "c")]
    )
    revealed = out.replace("builtins.", "")
    assert 'Revealed type is "def (k: str, n: int =) -> str"' in revealed
    assert 'Argument 1 to "f" has incompatible type "int"; expected "str"' in out


def test_what_a_decoration_can_know_is_refused_there(guard: Guard) -> None:
    """Two mistakes the decoration can see were refused only at the first call (found by
    a new user's first hour): an AsyncGuard given to a sync function, and a key whose
    dimensions do not fit the registered policy it names."""
    asynchronous = AsyncGuard(MemoryBackend(), clock=ManualClock(0.0))
    with pytest.raises(ConfigError, match="sync function 'send' needs a Guard"):

        @capped("2/minute", guard=asynchronous)
        def send() -> None: ...

    with pytest.raises(ConfigError) as refused:

        @capped("sms", key="msg.to", guard=guard)
        def sms(msg: Message) -> None: ...

    text = str(refused.value)
    assert "policy 'sms'" in text
    assert "recipient, content" in text
    assert "key={'recipient': ..., 'content': ...}" in text

    @capped("sms", key={"recipient": "msg.to", "content": "msg.body"}, guard=guard)
    def fits(msg: Message) -> bool:
        return True

    assert fits(Message("a", "b"))

    @capped("2/minute", guard=asynchronous)  # an async function takes either
    async def fine() -> bool:
        return True

    assert asyncio.run(fine())


def test_a_refusal_at_decoration_names_a_callable_without_a_name(guard: Guard) -> None:
    """Review: the refusals of check_fit read ``func.__name__``, which a functools.partial
    and a callable instance lack: an AttributeError instead of the ConfigError naming the
    fix."""
    import functools

    def send(msg: Message, extra: int) -> None: ...

    asynchronous = AsyncGuard(MemoryBackend(), clock=ManualClock(0.0))
    with pytest.raises(ConfigError, match="needs a Guard"):
        capped("2/minute", guard=asynchronous)(functools.partial(send, extra=1))
    with pytest.raises(ConfigError, match="policy 'sms'"):
        capped("sms", key="msg.to", guard=guard)(functools.partial(send, extra=1))


def test_a_key_without_the_priority_its_policy_decides_by_is_refused_at_decoration() -> None:
    """Review: a policy with priorities refuses every hit that gives no ``priority``; a key
    that cannot give one fits its dimensions, so it decorated fine and every call failed."""
    guard = Guard(MemoryBackend(), clock=ManualClock(0.0))
    rule = Rule("5/minute", by=("user",), caps={"lo": 2})
    guard.add_policy(Policy("p", rule, priorities=("hi", "lo")))
    with pytest.raises(ConfigError, match="priority"):

        @capped("p", key="user", guard=guard)
        def send(user: str) -> None: ...


def test_a_key_path_into_self_or_cls_keys_a_method_by_its_instance(guard: Guard) -> None:
    """key="self.tenant" passed the decoration check (the function has a parameter self),
    then every call raised "no argument named 'self'": a bound method's signature has no
    self (found by a new user). The path now reads the instance (or the class), however the
    method is called."""

    class Svc:
        region = "eu"

        def __init__(self, tenant: str) -> None:
            self.tenant = tenant

        @capped("1/minute", key="self.tenant", guard=guard)
        def send(self, msg: str) -> str:
            return msg

        @capped("1/minute", key={"tenant": "self.tenant", "msg": "msg"}, guard=guard)
        async def asend(self, msg: str) -> str:
            return msg

        @classmethod
        @capped("1/minute", key="cls.region", guard=guard)
        def klass(cls) -> str:
            return cls.region

    assert Svc("t1").send("m") == "m"
    assert Svc("t2").send("m") == "m"  # its own budget
    with pytest.raises(CapExceeded):
        Svc("t1").send("other")
    with pytest.raises(CapExceeded):
        Svc.send(Svc("t2"), "m")  # called through the class, self given as an argument
    assert asyncio.run(Svc("t1").asend("m")) == "m"
    with pytest.raises(CapExceeded):
        asyncio.run(Svc("t1").asend("m"))
    assert Svc.klass() == "eu"
    with pytest.raises(CapExceeded):
        Svc("t3").klass()  # through an instance: still the class
