"""A head start for ``lnet-get URL ...``: every replica's connection opened, and its first range requested,
before trio is imported.

Loading trio and the download stack takes 0.15-0.2 s on a small machine; a TCP handshake to a far replica takes a
round trip, and so does the first byte of an answer. ``Predial.start`` resolves and dials each replica's host in
a thread of its own as soon as the arguments are parsed (the standard library only: nothing here loads trio) and,
for plain HTTP, writes the download's first range request (``first``: the planner's first ranges, from
``engines.chunks.first_ranges``) the moment the handshake is done. So the handshakes, and the first answers,
travel while the imports run. The download takes each early connection with ``take(url)``: the stream, the range
already asked for on it (None for HTTPS, whose TLS handshake waits for trio), and the handshake's duration, a
round trip measured before any request. Only the first URL of each ``(host, port)`` is dialled early; every other
connection is opened the usual way (``trio.open_tcp_stream``, with its happy eyeballs), as is one whose early dial
failed.

Every dial is bounded by the command's timeout; ``close`` closes what was dialled and never taken.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lnet.client.wire.range_request import Target, parse_url, range_request

if TYPE_CHECKING:
    import trio

__all__ = ["Early", "Predial"]


@dataclass
class Early:
    """A connection dialled before the event loop: ``sent`` is the range requested on it already (or None), and
    ``handshake_s`` how long its TCP handshake took (a round trip)."""

    stream: trio.abc.Stream
    sent: tuple[int, int] | None
    handshake_s: float


class _Dial:
    """One early connection: dialled by its thread, then taken by the download or closed."""

    def __init__(self, target: Target, first: tuple[int, int] | None) -> None:
        self.target = target
        self.first = first if target.scheme == "http" else None  # HTTPS: nothing is written before TLS
        self.done = threading.Event()
        self.handshake_s = 0.0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._abandoned = False

    def run(self, timeout: float) -> None:
        sock: socket.socket | None = None
        try:
            began = time.monotonic()
            sock = socket.create_connection((self.target.host, self.target.port), timeout=timeout)
            self.handshake_s = time.monotonic() - began
            if self.first is not None:
                sock.sendall(range_request(self.target, *self.first))
        except OSError:
            if sock is not None:
                sock.close()
            sock = None  # the usual dial tries again, and reports the error
        with self._lock:
            if self._abandoned and sock is not None:
                sock.close()
            else:
                self._sock = sock
        self.done.set()

    def claim(self) -> socket.socket | None:
        """The connected socket, once (None if the dial failed or it was claimed or abandoned)."""
        with self._lock:
            sock, self._sock = self._sock, None
            self._abandoned = True
            return sock

    def abandon(self) -> None:
        sock = self.claim()
        if sock is not None:
            sock.close()


class Predial:
    """Early connections to the hosts of ``urls``, one per distinct ``(host, port)``."""

    def __init__(self) -> None:
        self._dials: dict[str, _Dial] = {}  # by URL: the first URL of its (host, port)

    @classmethod
    def start(cls, urls: Sequence[str], timeout: float,
              first: Sequence[tuple[int, int]] | None = None) -> Predial:
        """Dial every replica's host now, each in a daemon thread (resolving its name there too); ``first``: the
        range to request at once of each URL (in order), or None to only connect."""
        predial = cls()
        hosts: set[tuple[str, int]] = set()
        for i, url in enumerate(urls):
            try:
                target = parse_url(url)
            except ValueError:
                continue  # the command reports a bad URL; nothing to dial
            if (target.host, target.port) in hosts or url in predial._dials:
                continue
            hosts.add((target.host, target.port))
            dial = predial._dials[url] = _Dial(target, first[i] if first is not None else None)
            threading.Thread(target=dial.run, args=(timeout,), name=f"lnet-predial-{target.host}",
                             daemon=True).start()
        return predial

    def __len__(self) -> int:
        return len(self._dials)

    async def take(self, url: str) -> Early | None:
        """The connection dialled early for ``url`` (waiting for its handshake if it is still on the way), once;
        None if there is none or it failed."""
        import trio

        dial = self._dials.pop(url, None)
        if dial is None:
            return None
        sock = None
        try:
            if not dial.done.is_set():
                await trio.to_thread.run_sync(dial.done.wait, abandon_on_cancel=True)
            sock = dial.claim()
        finally:
            if sock is None:
                dial.abandon()  # failed, or cancelled while waiting: the thread closes what it connects
        if sock is None:
            return None
        sock.setblocking(False)
        return Early(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), dial.first, dial.handshake_s)

    def close(self) -> None:
        """Close every early connection the download did not take."""
        for dial in self._dials.values():
            dial.abandon()
        self._dials.clear()
