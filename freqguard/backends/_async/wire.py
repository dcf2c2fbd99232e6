"""Replies read off one redis-py connection, for calls the caller packed (the lanes' I/O).

Every reply is read, error replies included (returned in their place), so one bad reply
never leaves the connection out of step with the calls sent on it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from redis import exceptions as rex
from redis.asyncio.connection import Connection as AsyncConnection

__all__ = ["drive", "read", "send_and_read"]


async def read(connection: AsyncConnection, count: int) -> list[object]:
    """Read ``count`` replies, in order; an error reply is returned in its place."""
    replies: list[object] = []
    for _ in range(count):
        try:
            replies.append(await connection.read_response(disable_decoding=True))
        except rex.ResponseError as exc:
            replies.append(exc)
    return replies


async def send_and_read(connection: AsyncConnection, packed: bytes, count: int) -> list[object]:
    """Send ``count`` packed calls at once, then read their replies (see :func:`read`)."""
    await connection.send_packed_command((packed,))  # type: ignore[no-untyped-call,unused-ignore]
    return await read(connection, count)


async def drive(
    steps: Generator[Callable[[], Any], Any, None],
    errors: tuple[type[BaseException], ...],
) -> None:
    """Run each request an I/O-free step generator yields, sending its reply back (an error
    of ``errors`` is thrown in instead), until it ends (the backends' first-call
    inspection: ``_inspect.inspection``)."""
    try:
        step = next(steps)
        while True:
            try:
                reply = await step()
            except errors as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration:
        return
