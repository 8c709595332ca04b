"""A head start for ``lnet-get URL ...``: every replica's connection opened, and its first range requested,
before trio is imported.

Loading trio and the download stack takes 0.1-0.2 s on a small machine; a TCP handshake to a far replica takes a
round trip, and so does the first byte of an answer. ``lnet-get``'s entry point (``commands.get_entry``) calls
``Predial.dial`` with the URLs on its command line before anything else is loaded, even before the arguments are
parsed (``command_line_urls``): each replica's host is resolved and dialled in a thread of its own (the standard
library only: nothing here loads trio or dataclasses). Once the arguments are parsed, ``ask`` gives each
connection the download's first range (``engines.chunks.first_ranges``), written the moment its handshake is
done (at once if it is). So the handshakes, and the first answers, travel while the imports run. The download
takes each early connection with ``take(url, timeout)``: the stream, the range already asked for on it (None for
HTTPS, whose TLS handshake waits for trio, or a resumed download, which asks for nothing early), the handshake's
duration (a round trip measured before any request) and when the range was written. Only the first URL of each
``(host, port)`` is dialled early; every other connection is opened the usual way (``trio.open_tcp_stream``,
with its happy eyeballs), as is one whose early dial failed. A URL dialled that the command does not use (a
typo, a manifest's run) is closed by ``close``.

The wait for an early handshake is bounded by the download's timeout, counted from the dial; the dialling
thread itself gives up after ``DIAL_BOUND_S`` at most (its connection is closed, never used, if it lands later).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from lnet.client.wire.range_request import Target, is_url, parse_url, range_request

if TYPE_CHECKING:
    import trio

__all__ = ["DIAL_BOUND_S", "MAX_EARLY_DIALS", "Early", "Predial", "command_line_urls"]

DIAL_BOUND_S = 300.0  # the dialling thread's own bound; the download waits at most its --timeout for it
MAX_EARLY_DIALS = 32  # hosts dialled early; more replicas than this are dialled the usual way


def command_line_urls(argv: Sequence[str]) -> list[str]:
    """The http(s) URLs among a command line's words, to dial before it is parsed; none when it asks for help or
    receives a transfer as it is sent (``--follow``), and not a depot's data URL (a publication, most likely: its
    first bytes are read through the depot client, not as a replica's range)."""
    if any(word in ("-h", "--help", "--follow") for word in argv):
        return []
    return [word for word in argv if is_url(word) and "/v1/data/" not in word]


class Early(NamedTuple):
    """A connection dialled before the event loop: ``sent`` is the range requested on it already (or None),
    ``handshake_s`` how long its TCP handshake took (a round trip) and ``sent_at`` when the range was written, on
    trio's clock (None if nothing was)."""

    stream: trio.abc.Stream
    sent: tuple[int, int] | None
    handshake_s: float
    sent_at: float | None


class _Dial:
    """One early connection: dialled by its thread, given its first range by ``ask``, then taken by the download
    or closed. Everything it shares between the two threads is guarded by its lock."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.began = time.perf_counter()
        self.done = threading.Event()  # the dial is over (connected or failed)
        self.handshake_s = 0.0
        self.first: tuple[int, int] | None = None  # the range to ask for once connected
        self.sent: tuple[int, int] | None = None  # ... once written
        self.sent_at: float | None = None  # time.perf_counter() then
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._abandoned = False

    def run(self, timeout: float) -> None:
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((self.target.host, self.target.port), timeout=timeout)
            self.handshake_s = time.perf_counter() - self.began
        except OSError:
            sock = None  # the usual dial tries again, and reports the error
        with self._lock:
            if self._abandoned and sock is not None:
                sock.close()
            elif sock is not None:
                self._sock = sock
                self._write_first()
        self.done.set()

    def ask(self, first: tuple[int, int]) -> None:
        """Request ``first`` on this connection: now if it is up, else the moment it is (plain HTTP only:
        nothing is written before a TLS handshake)."""
        if self.target.scheme != "http":
            return
        with self._lock:
            if self.first is None and not self._abandoned:
                self.first = first
                if self._sock is not None:
                    self._write_first()

    def _write_first(self) -> None:
        assert self._sock is not None  # called with the lock held, once connected
        if self.first is None or self.sent is not None:
            return
        try:
            self._sock.sendall(range_request(self.target, *self.first))
        except OSError:
            self._sock.close()  # a connection that cannot take a request is no head start
            self._sock = None
            return
        self.sent, self.sent_at = self.first, time.perf_counter()

    def claim(self) -> socket.socket | None:
        """The connected socket, once (None if the dial failed or it was claimed or abandoned); nothing is written
        on it after this."""
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
    def dial(cls, urls: Sequence[str], timeout: float = DIAL_BOUND_S) -> Predial:
        """Dial every replica's host now, each in a daemon thread (resolving its name there too), for at most
        ``timeout`` seconds; nothing is requested until ``ask``."""
        predial = cls()
        hosts: set[tuple[str, int]] = set()
        for url in urls:
            try:
                target = parse_url(url)
            except ValueError:
                continue  # the command reports a bad URL; nothing to dial
            if (target.host, target.port) in hosts or len(hosts) >= MAX_EARLY_DIALS:
                continue
            hosts.add((target.host, target.port))
            dial = predial._dials[url] = _Dial(target)
            threading.Thread(target=dial.run, args=(timeout,), name=f"lnet-predial-{target.host}",
                             daemon=True).start()
        return predial

    def ask(self, urls: Sequence[str], first: Sequence[tuple[int, int]]) -> None:
        """Request ``first[i]`` of ``urls[i]`` on its early connection, for each URL dialled early."""
        for url, span in zip(urls, first, strict=True):
            if (dial := self._dials.get(url)) is not None:
                dial.ask(span)

    def __len__(self) -> int:
        return len(self._dials)

    async def take(self, url: str, timeout_s: float = DIAL_BOUND_S) -> Early | None:
        """The connection dialled early for ``url``, once, waiting for its handshake if it is still on the way
        (until ``timeout_s`` seconds after the dial began: then the replica fails as a connection that does not
        come up would, with ``ReplicaError``); None if there is none or its dial failed."""
        import trio

        from lnet.client.wire.range_connection import ReplicaError

        dial = self._dials.pop(url, None)
        if dial is None:
            return None
        sock = None
        try:
            if not dial.done.is_set():
                left = dial.began + timeout_s - time.perf_counter()
                with trio.move_on_after(left):
                    await trio.to_thread.run_sync(dial.done.wait, abandon_on_cancel=True)
                if not dial.done.is_set():
                    raise ReplicaError(f"no connection within {timeout_s:g} s")
            sock = dial.claim()
        finally:
            if sock is None:
                dial.abandon()  # failed, timed out or cancelled while waiting: the thread closes what it connects
        if sock is None:
            return None
        sock.setblocking(False)
        sent_at = None
        if dial.sent_at is not None:  # trio's clock and perf_counter count the same seconds
            sent_at = trio.current_time() - (time.perf_counter() - dial.sent_at)
        return Early(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), dial.sent, dial.handshake_s, sent_at)

    def close(self) -> None:
        """Close every early connection the download did not take."""
        for dial in self._dials.values():
            dial.abandon()
        self._dials.clear()
