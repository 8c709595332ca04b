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

These replace private internals of h11 (three methods of ``ReceiveBuffer``) and httpcore (``_send_event`` and
``READ_NUM_BYTES`` of ``AsyncHTTP11Connection``), so they are applied only to the versions they were checked
against (``CHECKED_H11``, ``CHECKED_HTTPCORE``: constraints.txt pins them; the test suite compares the buffer with
h11's own on random input), both or neither, and the private modules are imported only by ``check`` and
``install``: a rename in h11 turns the speed-up off, it does not break the import of the depot or the client.
``install_http_patches`` says so in the log when it cannot apply them; the depot reports it as its fast path
(``lnet.depot.fast_path``).
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the type checker only: at run time h11's private modules are imported by install()
    from h11._receivebuffer import ReceiveBuffer

__all__ = [
    "CHECKED_H11", "CHECKED_HTTPCORE", "CLIENT_READ_SIZE", "check", "install", "install_http_patches", "installed",
    "original_methods",
]

log = logging.getLogger("lnet.http")

CHECKED_H11 = frozenset({"0.16.0"})
CHECKED_HTTPCORE = frozenset({"1.0.9"})
CLIENT_READ_SIZE = 1024 * 1024
_SMALL = 64 * 1024  # pieces of an event under this are joined (headers, chunk framing); a body piece is sent as is

# What install() replaces in ReceiveBuffer, and the instance attributes the replacements use.
_BUFFER_METHODS = ("__iadd__", "_extract", "maybe_extract_at_most")
_BUFFER_FIELDS = ("_data", "_next_line_search", "_multiple_lines_search")
_originals: dict[str, Any] = {}


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


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check() -> str | None:
    """Why the speed-ups cannot be applied to the h11 and httpcore installed here, or None if they can: both must
    be versions they were checked against and still have what they replace and use."""
    for package, checked in (("h11", CHECKED_H11), ("httpcore", CHECKED_HTTPCORE)):
        found = _version(package)
        if found not in checked:
            return (
                f"{package} {found or '(not installed)'} is not a version it was checked against "
                f"({', '.join(sorted(checked))})"
            )
    try:
        import h11
        from h11._receivebuffer import ReceiveBuffer
        from httpcore._async.http11 import AsyncHTTP11Connection
    except ImportError as exc:
        return f"cannot import what it replaces: {exc}"
    missing = [f"ReceiveBuffer.{name}" for name in _BUFFER_METHODS if not hasattr(ReceiveBuffer, name)]
    missing += [f"ReceiveBuffer().{name}" for name in _BUFFER_FIELDS if not hasattr(ReceiveBuffer(), name)]
    missing += [f"AsyncHTTP11Connection.{name}" for name in ("_send_event", "READ_NUM_BYTES")
                if not hasattr(AsyncHTTP11Connection, name)]
    if not hasattr(h11.Connection, "send_with_data_passthrough"):
        missing.append("h11.Connection.send_with_data_passthrough")
    return f"missing in this h11/httpcore: {', '.join(missing)}" if missing else None


def original_methods() -> dict[str, Any]:
    """h11's own ``ReceiveBuffer`` methods that ``install`` replaces (for the tests that compare them)."""
    if not _originals:
        from h11._receivebuffer import ReceiveBuffer

        _originals.update({name: getattr(ReceiveBuffer, name) for name in _BUFFER_METHODS})
    return dict(_originals)


def install() -> bool:
    """Apply the copy-saving methods to h11 and httpcore if ``check`` finds nothing against it; returns whether
    they are in place. Idempotent."""
    if installed():
        return True
    if check() is not None:
        return False
    from h11._receivebuffer import ReceiveBuffer
    from httpcore._async.http11 import AsyncHTTP11Connection

    original_methods()  # kept before they are replaced
    ReceiveBuffer.__iadd__ = _iadd  # type: ignore[method-assign]
    ReceiveBuffer._extract = _extract  # type: ignore[method-assign]
    ReceiveBuffer.maybe_extract_at_most = _maybe_extract_at_most  # type: ignore[method-assign,assignment]
    AsyncHTTP11Connection._send_event = _send_event  # type: ignore[method-assign]
    AsyncHTTP11Connection.READ_NUM_BYTES = CLIENT_READ_SIZE
    return True


def installed() -> bool:
    """Whether the speed-ups are in place in this process (without importing h11 when nothing loaded it)."""
    module = sys.modules.get("h11._receivebuffer")
    return module is not None and getattr(module.ReceiveBuffer, "maybe_extract_at_most", None) is _maybe_extract_at_most


_http_patched = False
_speed_ups_tried = False


def install_http_patches(*, speed_ups: bool = True) -> None:
    """What every lnet process that speaks HTTP changes in the libraries under it, once per process, and never at
    import: the log filter that keeps capabilities out of the HTTP libraries' logs and, with ``speed_ups``, the
    copy-saving methods above (a warning in the log, once, when they cannot be applied here). A ``DepotClient``
    and a ``RangeConnection`` call it when made; a ``Depot`` asks for the log filter only (its speed-ups come
    with its fast path, ``lnet.depot.fast_path``). It loads h11 and msgpack only, nothing of the server."""
    global _http_patched, _speed_ups_tried
    if not _http_patched:
        from lnet.protocol import guard_http_logs

        guard_http_logs()
        _http_patched = True
    if speed_ups and not _speed_ups_tried:
        _speed_ups_tried = True
        if not install():
            log.warning("HTTP speed-ups off (h11 and httpcore as they are, slower): %s", check())
