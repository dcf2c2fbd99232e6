"""Replies read off one redis-py connection, for calls the caller packed (the lanes' I/O).

Every reply is read, error replies included (returned in their place), so one bad reply
never leaves the connection out of step with the calls sent on it.
"""

from __future__ import annotations

from redis import exceptions as rex
from redis.asyncio.connection import Connection as AsyncConnection

__all__ = ["read", "send_and_read"]


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
