"""Django requests in flight: the leases a request took (a policy with a concurrency rule)
held until it has been answered, a streamed answer's until its body is sent or closed (the
server closes every response then), whether the middleware or a view's cap took them. A
streamed answer Django drops unclosed, answering 500 instead (a middleware outside
freqguard's failed once it had passed), gives its leases back then."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.core.signals import got_request_exception

from freqguard.decision import Decision
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._decide import HeldBody

__all__ = ["AsyncHeldBody", "aanswered", "answered", "dropped"]

R = TypeVar("R")
_log = logging.getLogger("freqguard")


def answered(
    guard: Guard, held: list[Decision], respond: Callable[[], R], streamed: list[Any]
) -> R:
    """``respond()``, the leases in ``held`` given back once it has answered (or raised); a
    streamed answer's when its body is closed (or its response dropped: the body is noted
    in the request's ``streamed``)."""
    if not held:
        return respond()
    try:
        response = respond()
    except BaseException:
        _release(guard, held)
        raise
    if not getattr(response, "streaming", False):
        _release(guard, held)
        return response
    body = HeldBody(response.streaming_content, lambda: _release(guard, held))  # type: ignore[attr-defined]
    response.streaming_content = body  # type: ignore[attr-defined]
    streamed.append(body)
    return response


async def aanswered(
    guard: AsyncGuard,
    held: list[Decision],
    respond: Callable[[], Awaitable[R]],
    streamed: list[Any],
) -> R:
    """:func:`answered` on an event loop."""
    if not held:
        return await respond()
    try:
        response = await respond()
    except BaseException:
        await _arelease(guard, held)
        raise
    if not getattr(response, "streaming", False):
        await _arelease(guard, held)
        return response

    async def release() -> None:
        await _arelease(guard, held)

    answer: Any = response
    content = answer.streaming_content
    body = answer.streaming_content = (
        AsyncHeldBody(content, release)
        if answer.is_async
        else HeldBody(content, async_to_sync(release))
    )
    streamed.append(body)
    return response


def dropped(request: Any = None, **_: object) -> None:
    """Django's ``got_request_exception``: it answers 500 in place of the response under
    way, so a streamed answer that had passed freqguard's is dropped, never closed (a
    middleware outside freqguard's failed): its leases go back now, where they were held
    until they lapsed. (Django sends it for an exception it did not foresee; one it
    answers itself, ``Http404`` or ``PermissionDenied``, leaves such leases to lapse.)"""
    notes = getattr(getattr(request, "_request", request), "freqguard", None)
    for body in getattr(notes, "streamed", ()):
        try:
            body.close()
        except Exception:  # Django is answering an error: never fail its answer
            _log.warning(
                "freqguard: a dropped answer's leases could not be given back", exc_info=True
            )


got_request_exception.connect(dropped, dispatch_uid="freqguard.dropped")


def _release(guard: Guard, held: list[Decision]) -> None:
    for decision in held:
        guard.release(decision)


async def _arelease(guard: AsyncGuard, held: list[Decision]) -> None:
    for decision in held:
        await guard.release(decision)


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
