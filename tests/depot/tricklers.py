"""Trickling clients, as the black-box probe ran them: a GET that takes 1 KiB every 5 s through a 4 KiB receive
buffer, and a PUT whose body comes a byte every 2 s; each comes back a second after it is refused or cut. They
connect from another loopback address than the normal client (127.0.0.2 and .3: Linux answers all of
127.0.0.0/8), as clients of another host would. Used by tests/depot/test_trickle.py and bench/trickle.py."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import trio

__all__ = ["Tally", "connect", "reader", "writer"]


@dataclass
class Tally:
    answered: int = 0  # requests the depot took (200, or a write's body accepted for a while)
    refused: int = 0  # 429 or 503 at once
    cut: int = 0  # connections the depot ended (a write answered 408, a reset)


async def connect(address: tuple[str, int], source: str) -> trio.socket.SocketType:
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.bind((source, 0))
    await sock.connect(address)
    return sock


async def reader(
    address: tuple[str, int], read: str, stop: trio.Event, tally: Tally, source: str = "127.0.0.2"
) -> None:
    """A GET that takes 1 KiB every 5 s; refused, it comes back after a second."""
    while not stop.is_set():
        sock = await connect(address, source)
        try:
            await sock.send(f"GET /v1/data/{read} HTTP/1.1\r\nHost: d\r\n\r\n".encode())
            head = await sock.recv(1024)
            if not head.startswith(b"HTTP/1.1 200"):
                tally.refused += 1
                await trio.sleep(1)
                continue
            tally.answered += 1
            while not stop.is_set():
                with trio.move_on_after(5):
                    await stop.wait()
                if not await sock.recv(1024):
                    tally.cut += 1
                    break
        except OSError:
            tally.cut += 1
        finally:
            sock.close()


async def writer(
    address: tuple[str, int], write: str, length: int, stop: trio.Event, tally: Tally, source: str = "127.0.0.3"
) -> None:
    """A PUT whose body comes a byte every 2 s; answered or cut, it comes back after a second."""
    while not stop.is_set():
        sock = await connect(address, source)
        try:
            await sock.send(f"PUT /v1/data/{write}?offset=0 HTTP/1.1\r\nHost: d\r\nContent-Length: {length}\r\n\r\n"
                            .encode())
            answer = b""
            while not stop.is_set() and not answer:
                with trio.move_on_after(2):
                    answer = await sock.recv(1024)
                    if not answer:
                        tally.cut += 1
                        break
                if not answer:
                    await sock.send(b"w")
            if answer.startswith((b"HTTP/1.1 429", b"HTTP/1.1 503")):
                tally.refused += 1
            elif answer:
                tally.answered += 1
                tally.cut += answer.startswith(b"HTTP/1.1 408")
        except OSError:
            tally.cut += 1
        finally:
            sock.close()
        await trio.sleep(1)
