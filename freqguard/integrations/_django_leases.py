"""Django requests in flight: the leases a request took (a policy with a concurrency rule)
held until it has been answered, a streamed answer's until its body is sent or closed (the
server closes every response then), whether the middleware or a view's cap took them. A
streamed answer Django drops unclosed, answering an error instead (a middleware outside
freqguard's failed, or raised ``Http404``, once it had passed), gives its leases back as
Django closes the request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from asgiref.sync import async_to_sync

from freqguard.decision import Decision
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._held import HeldBody, arelease_each, release_each

__all__ = ["AsyncHeldBody", "aanswered", "answered"]

R = TypeVar("R")
_log = logging.getLogger("freqguard")


class _Closing:
    """A request's ``close`` that first closes the streamed bodies holding its leases that
    are still open. Django closes the request with the response it answered, in every
    handler (the response's closers, as the server closes it): a body still open then had
    its response dropped, an error answered in its place (a middleware outside
    freqguard's raised once it had passed), and its leases go back now, where they were
    held until they lapsed. A release that fails is logged: the request is over."""

    __slots__ = ("bodies", "closing")

    def __init__(self, closing: Callable[[], object]) -> None:
        self.bodies: list[Any] = []
        self.closing = closing

    def __call__(self) -> None:
        try:
            while self.bodies:
                try:
                    self.bodies.pop().close()
                except Exception:
                    _log.warning(
                        "freqguard: a dropped answer's leases could not be given back",
                        exc_info=True,
                    )
        finally:
            self.closing()


def _noted(request: Any, body: R) -> R:
    """``body``, closed with ``request`` if it was not by then (:class:`_Closing`)."""
    request = getattr(request, "_request", request)  # a DRF Request's Django request
    closing = request.close
    if not isinstance(closing, _Closing):
        closing = request.close = _Closing(closing)
    closing.bodies.append(body)
    return body


def answered(guard: Guard, held: list[Decision], respond: Callable[[], R], request: Any) -> R:
    """``respond()``, which may take leases into ``held`` (it decides the request too: a
    Ctrl-C between a take and this ``try`` left its lease held), given back once it has
    answered (or raised); a streamed answer's when its body is closed, or with ``request``
    (:class:`_Closing`)."""
    gave = False
    try:
        response = respond()
        if held and not getattr(response, "streaming", False):
            gave = True  # a release that fails is not tried again, but one a Ctrl-C cut
            release_each(guard, held)
        elif held:
            release = partial(release_each, guard, held)
            body = HeldBody(response.streaming_content, release)  # type: ignore[attr-defined]
            response.streaming_content = _noted(request, body)  # type: ignore[attr-defined]
        return response
    except BaseException as exc:
        if not gave or not isinstance(exc, Exception):
            release_each(guard, held)
        raise


async def aanswered(
    guard: AsyncGuard, held: list[Decision], respond: Callable[[], Awaitable[R]], request: Any
) -> R:
    """:func:`answered` on an event loop."""
    if not held:
        return await respond()
    try:
        response = await respond()
    except BaseException:
        await arelease_each(guard, held)
        raise
    if not getattr(response, "streaming", False):
        await arelease_each(guard, held)
        return response

    async def release() -> None:
        await arelease_each(guard, held)

    answer: Any = response
    content = answer.streaming_content
    answer.streaming_content = _noted(
        request,
        AsyncHeldBody(content, release)
        if answer.is_async
        else HeldBody(content, async_to_sync(release)),
    )
    return response


class AsyncHeldBody:
    """:class:`HeldBody` for a body sent by an event loop: the leases go back (awaited) when
    the body ends or fails (a cancellation included), or when it is closed before that."""

    def __init__(self, body: AsyncIterable[bytes], release: Callable[[], Awaitable[None]]) -> None:
        self._body, self._release, self._released = aiter(body), release, False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._body)
        except BaseException:  # the end (StopAsyncIteration), a failure, a cancellation
            if not self._released:
                self._released = True
                await self._release()
            raise

    def close(self) -> None:
        """Closed before its end (Django closes every response): the leases go back on the
        event loop if this thread runs one, else on the loop that serves this thread."""
        if self._released:
            return
        self._released = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            async_to_sync(self._release)()
        else:
            task = loop.create_task(_awaited(self._release()))
            _RELEASING.add(task)
            task.add_done_callback(_RELEASING.discard)


_RELEASING: set[asyncio.Task[None]] = set()  # held until done: a task is weakly referenced


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable
