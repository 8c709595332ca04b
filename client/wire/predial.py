"""A head start for ``lnet-get URL ...``: every replica's TCP connection is opened before trio is imported.

Loading trio and the download stack takes about 0.15-0.2 s on a small machine; a TCP handshake to a far replica
takes a round trip. ``Predial.start`` resolves and dials each replica's host in a thread of its own as soon as the
arguments are parsed (the standard library only: nothing here loads trio), so the handshakes travel while the
imports run, and the first range request goes out the moment the event loop is up instead of one round trip
later. ``Predial.connect`` is the download's ``Connector``: the first connection to each ``(host, port)`` takes
the socket dialled early (waiting for its handshake if it is still on the way); every other connection, and any
whose early dial failed, is opened the usual way (``trio.open_tcp_stream``, with its happy eyeballs).

Every dial is bounded by the command's timeout; ``close`` closes what was dialled and never used.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import trio

__all__ = ["Predial"]


class _Dial:
    """One early connection: dialled by its thread, then taken by one ``connect`` or closed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._abandoned = False

    def run(self, host: str, port: int, timeout: float) -> None:
        try:
            sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError:
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


def _address(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None  # the command reports a bad URL; nothing to dial
    return parts.hostname, port


class Predial:
    """Early TCP connections to the hosts of ``urls``, one per distinct ``(host, port)``."""

    def __init__(self) -> None:
        self._dials: dict[tuple[str, int], _Dial] = {}

    @classmethod
    def start(cls, urls: Sequence[str], timeout: float) -> Predial:
        """Dial every replica's host now, each in a daemon thread (resolving its name there too)."""
        predial = cls()
        for url in urls:
            address = _address(url)
            if address is None or address in predial._dials:
                continue
            dial = predial._dials[address] = _Dial()
            threading.Thread(target=dial.run, args=(*address, timeout), name=f"lnet-predial-{address[0]}",
                             daemon=True).start()
        return predial

    def __len__(self) -> int:
        return len(self._dials)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """The stream to ``(host, port)``: the early connection the first time, a new one after."""
        import trio

        dial = self._dials.pop((host, port), None)
        if dial is not None:
            sock = None
            try:
                if not dial.done.is_set():
                    await trio.to_thread.run_sync(dial.done.wait, abandon_on_cancel=True)
                sock = dial.claim()
            finally:
                if sock is None:
                    dial.abandon()  # cancelled while waiting: the thread closes what it connects
            if sock is not None:
                sock.setblocking(False)
                return trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        return await trio.open_tcp_stream(host, port)

    def close(self) -> None:
        """Close every early connection no download took."""
        for dial in self._dials.values():
            dial.abandon()
        self._dials.clear()
