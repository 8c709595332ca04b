"""A request body of one buffer, for every lnet request that sends one (the client's writes and control calls, the
depot's weather probes, the directory's etcd calls).

httpx turns ``content=bytes`` into a stream whose ``__aiter__`` is an async generator, and httpcore sends a body
from inside ``async for chunk in request.stream``. A write cancelled or failed there (a lost end game copy, a
timeout, a reset) leaves that generator suspended, and trio warns when the garbage collector finds it, perhaps
much later, in another task or another ``trio.run``. ``OneBuffer`` iterates as a plain object: nothing is left
to finalize. It sends the buffer as it is (a ``memoryview`` of a block is not copied into ``bytes``).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["OneBuffer", "with_body"]


class OneBuffer(httpx.AsyncByteStream):
    """``buffer`` as a request body; each iteration yields it once."""

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        self.buffer = buffer

    def __aiter__(self) -> _Once:
        return _Once(self.buffer)


class _Once:
    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        self._buffer: bytes | bytearray | memoryview | None = buffer

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> Any:  # httpcore writes any buffer; views avoid a copy
        buffer, self._buffer = self._buffer, None
        if buffer is None:
            raise StopAsyncIteration
        return buffer


def with_body(request: httpx.Request, body: bytes | bytearray | memoryview) -> httpx.Request:
    """``request`` (built without content: ``httpx.Request`` or a client's ``build_request``) sending ``body``
    through ``OneBuffer``, its ``Content-Length`` set."""
    request.headers["Content-Length"] = str(len(body))
    request.stream = OneBuffer(body)
    return request
