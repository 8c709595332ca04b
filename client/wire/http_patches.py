"""What the client changes in the HTTP libraries under it, applied when a client starts and never at import.

``install_http_patches()`` runs when a ``DepotClient`` or a ``RangeConnection`` is made: the log filter that keeps
capabilities out of httpx's and httpcore's logs, and h11's copy-saving receive buffer (httpx and
``RangeConnection`` read through h11, so every read saves the same copies as the depot's writes). It must not
load anything of the depot server (starlette, hypercorn, the app): ``lnet.depot.h11_receive`` and
``lnet.depot.protocol`` load h11 and msgpack only.
"""

from __future__ import annotations

__all__ = ["install_http_patches"]

_installed = False


def install_http_patches() -> None:
    """Apply the client's patches once per process (later calls return at once)."""
    global _installed
    if _installed:
        return
    from lnet.depot import h11_receive
    from lnet.depot.protocol import guard_http_logs

    guard_http_logs()
    h11_receive.install()
    _installed = True
