"""A faster receive path for h11, the HTTP/1.1 engine under both hypercorn (the depot) and httpx (the client).

h11's ``ReceiveBuffer.maybe_extract_at_most`` copies the bytes it is about to hand out once only to see
whether there are any, and ``_extract`` copies them again even when the whole buffer goes. On a depot's write
path those two copies were 33% of the process's time (py-spy, ``bench/depot_throughput.py``). ``install()``
replaces the two methods with ones that return exactly what h11's do, without the wasted copies: when all
buffered bytes go, the buffer itself is handed out and a new empty one takes its place.

It is applied only to the h11 versions it was checked against (the test suite compares it with h11's own
methods on random input); with any other version h11 is left as it is.
"""

from __future__ import annotations

from importlib.metadata import version

from h11._receivebuffer import ReceiveBuffer

__all__ = ["CHECKED_VERSIONS", "install", "installed"]

CHECKED_VERSIONS = frozenset({"0.14.0", "0.15.0", "0.16.0"})

_original_extract = ReceiveBuffer._extract
_original_maybe_extract_at_most = ReceiveBuffer.maybe_extract_at_most


def _extract(self: ReceiveBuffer, count: int) -> bytearray:
    data: bytearray = self._data
    if count >= len(data):
        out = data
        self._data = bytearray()
    else:
        out = data[:count]
        del data[:count]
    self._next_line_search = 0
    self._multiple_lines_search = 0
    return out


def _maybe_extract_at_most(self: ReceiveBuffer, count: int) -> bytearray | None:
    if count <= 0 or not self._data:
        return None
    return _extract(self, count)


def install() -> bool:
    """Use the copy-saving methods if this h11 is one they were checked against; returns whether it did."""
    if version("h11") not in CHECKED_VERSIONS:
        return False
    ReceiveBuffer._extract = _extract  # type: ignore[method-assign]
    ReceiveBuffer.maybe_extract_at_most = _maybe_extract_at_most  # type: ignore[method-assign]
    return True


def installed() -> bool:
    return ReceiveBuffer.maybe_extract_at_most is _maybe_extract_at_most
