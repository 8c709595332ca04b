"""How a command reaches the network: the seam the libraries have (``transport=``, ``connect=``), carried up to
``main(argv, *, io=...)`` so that a test runs a whole command (parsing, output, exit code) on an emulated network.

Light on purpose (imported before parsing): httpx and trio are named for the type checker only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from lnet.client.sending.relay import Offload
    from lnet.client.wire.predial import Predial
    from lnet.client.wire.range_connection import Connector

__all__ = ["ClientIO"]


@dataclass(frozen=True)
class ClientIO:
    """``transport``: how depot HTTP requests are carried (None: the network; tests pass the emulated network's
    or in-process depots'). ``connect``: how the byte stream to a replica (``lnet-get URL ...``,
    ``lnet-send --source``) is opened (None: TCP; tests pass an in-memory replica network). ``offload``: how
    lnet-send runs the reads and hashes of what it sends (None: in worker threads; tests on trio's mock clock run
    them inline, since the clock may jump while a worker thread runs). ``early``: the replicas' connections
    ``lnet-get URL ...`` dialled before trio was loaded (``wire.predial``), taken by the download's first
    connections."""

    transport: httpx.AsyncBaseTransport | None = None
    connect: Connector | None = None
    offload: Offload | None = None
    early: Predial | None = None
