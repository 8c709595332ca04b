"""A faster data path for h11, the HTTP/1.1 engine under both hypercorn (the depot) and httpx (the client).

Receiving: h11's ``ReceiveBuffer`` appends every received ``bytes`` to a ``bytearray`` (a copy), copies the bytes
it is about to hand out once only to see whether there are any, and copies them again in ``_extract`` even when
the whole buffer goes; hypercorn and httpcore then copy each body piece once more with ``bytes()``. On a depot's
write path those copies were a third of the process's time (py-spy, ``bench/depot_throughput.py``). With
``install()`` a received ``bytes`` that lands in an empty buffer is kept as it is, and a body piece that takes
the whole buffer is handed out as that same object: no copy in h11, and ``bytes()`` of a ``bytes`` is free. The
header parser still gets the ``bytearray`` lines it edits in place.

Sending: httpcore turns every h11 event into one ``bytes`` with ``b"".join``, which copies a ``memoryview`` body
piece (the depot pushes views of its allocations; the client sends views of the caller's buffer). ``install()``
has httpcore send a lone body piece as it is, through h11's own ``send_with_data_passthrough`` (the API h11
offers for exactly this), and read 1 MiB per receive instead of 64 KiB (fewer trips through h11 per byte).

It is applied only to the h11 and httpcore versions it was checked against (the test suite compares the buffer
with h11's own on random input); with any other version the libraries are left as they are.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from h11._receivebuffer import ReceiveBuffer

__all__ = ["CHECKED_HTTPCORE", "CHECKED_VERSIONS", "CLIENT_READ_SIZE", "install", "installed"]

CHECKED_VERSIONS = frozenset({"0.14.0", "0.15.0", "0.16.0"})
CHECKED_HTTPCORE = frozenset({"1.0.5", "1.0.6", "1.0.7", "1.0.8", "1.0.9"})
CLIENT_READ_SIZE = 1024 * 1024
_SMALL = 64 * 1024  # pieces of an event under this are joined (headers, chunk framing); a body piece is sent as is

_original_iadd = ReceiveBuffer.__iadd__
_original_extract = ReceiveBuffer._extract
_original_maybe_extract_at_most = ReceiveBuffer.maybe_extract_at_most


def _iadd(self: ReceiveBuffer, byteslike: bytes | bytearray) -> ReceiveBuffer:
    data: bytes | bytearray = self._data
    if not data and type(byteslike) is bytes:
        self._data = byteslike  # type: ignore[assignment]  # immutable: safe to hold, and maybe handed out whole
    else:
        if type(data) is bytes:
            data = bytearray(data)
        data += byteslike
        self._data = data  # type: ignore[assignment]
    return self


def _extract(self: ReceiveBuffer, count: int) -> bytearray:
    """The first ``count`` bytes as a ``bytearray`` (the header parser edits lines in place)."""
    data: bytes | bytearray = self._data
    if not isinstance(data, bytearray):  # bytes held as received
        out = bytearray(data[:count])
        self._data = bytearray(data[count:])
    elif count >= len(data):
        out = data
        self._data = bytearray()
    else:
        out = data[:count]
        del data[:count]
    self._next_line_search = 0
    self._multiple_lines_search = 0
    return out


def _maybe_extract_at_most(self: ReceiveBuffer, count: int) -> bytes | bytearray | None:
    """Body bytes: the buffer itself when all of it goes (a ``bytes`` if it was received as one)."""
    data: bytes | bytearray = self._data
    if count <= 0 or not data:
        return None
    if count >= len(data):
        self._data = bytearray()
        out = data
    elif not isinstance(data, bytearray):
        out = data[:count]
        self._data = data[count:]  # type: ignore[assignment]
    else:
        out = data[:count]
        del data[:count]
    self._next_line_search = 0
    self._multiple_lines_search = 0
    return out


async def _send_event(self: Any, event: Any, timeout: float | None = None) -> None:  # noqa: ASYNC109  (httpcore's signature)
    """httpcore's ``AsyncHTTP11Connection._send_event`` without the copy of a body piece."""
    pieces = self._h11_state.send_with_data_passthrough(event)
    if pieces is None:
        return
    if len(pieces) == 1 or all(len(piece) < _SMALL for piece in pieces):
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        await self._network_stream.write(data, timeout=timeout)
        return
    for piece in pieces:
        await self._network_stream.write(piece, timeout=timeout)


def install() -> bool:
    """Use the copy-saving methods if this h11 (and httpcore) is one they were checked against; returns whether
    the h11 part was installed."""
    if version("h11") not in CHECKED_VERSIONS:
        return False
    ReceiveBuffer.__iadd__ = _iadd  # type: ignore[method-assign]
    ReceiveBuffer._extract = _extract  # type: ignore[method-assign]
    ReceiveBuffer.maybe_extract_at_most = _maybe_extract_at_most  # type: ignore[method-assign,assignment]
    try:
        httpcore_version = version("httpcore")
    except Exception:  # not installed: a depot runs without httpx's transport only in odd setups
        return True
    if httpcore_version in CHECKED_HTTPCORE:
        from httpcore._async.http11 import AsyncHTTP11Connection

        AsyncHTTP11Connection._send_event = _send_event  # type: ignore[method-assign]
        AsyncHTTP11Connection.READ_NUM_BYTES = CLIENT_READ_SIZE
    return True


def installed() -> bool:
    return ReceiveBuffer.maybe_extract_at_most is _maybe_extract_at_most


_http_patched = False


def install_http_patches() -> None:
    """What every lnet process that speaks HTTP changes in the libraries under it, once per process (later calls
    return at once), and never at import: the log filter that keeps capabilities out of the HTTP libraries' logs,
    and the copy-saving receive buffer above. A ``DepotClient``, a ``RangeConnection`` and a ``Depot`` call it when
    made; ``lnet.depot.server`` adds the server's own. It loads h11 and msgpack only, nothing of the server."""
    global _http_patched
    if _http_patched:
        return
    from lnet.protocol import guard_http_logs

    guard_http_logs()
    install()
    _http_patched = True

