"""Plain-socket measurement programs that run on a testbed host: a TCP sink and sender, a UDP echo and pinger,
a UDP counter and blaster. Each prints one JSON line; `measure.py` runs them with `Testbed.spawn`.

Deliberately plain TCP and UDP (not lnet): they check the testbed itself. Standard library only, synchronous,
because each runs as its own process inside a host's namespace.

    python -m lnet.testbed.probe tcp-sink PORT SKIP_S
    python -m lnet.testbed.probe tcp-send HOST PORT SECONDS
    python -m lnet.testbed.probe udp-echo PORT
    python -m lnet.testbed.probe udp-ping HOST PORT COUNT INTERVAL_S
    python -m lnet.testbed.probe udp-count PORT IDLE_S
    python -m lnet.testbed.probe udp-blast HOST PORT COUNT INTERVAL_S
"""

from __future__ import annotations

import json
import math
import socket
import statistics
import struct
import sys
import time

__all__ = ["main"]

_CHUNK = 1 << 16
_END = b"end"


def tcp_sink(port: int, skip_s: float) -> dict[str, float]:
    """Accept one connection and measure its goodput, leaving out the first `skip_s` seconds (slow start, the
    receive buffer's autotuning) so that the figure is the steady state."""
    with socket.create_server(("0.0.0.0", port), reuse_port=True) as server:
        print(json.dumps({"listening": port}), flush=True)
        conn, _ = server.accept()
    with conn:
        first = time.monotonic()
        total = counted = 0
        start = last = 0.0
        while True:
            data = conn.recv(_CHUNK)
            if not data:
                break
            now = time.monotonic()
            total += len(data)
            if now - first >= skip_s:
                if not start:
                    start = now
                else:
                    counted += len(data)
                last = now
    span = last - start
    return {"bytes": total, "seconds": span, "mbit_s": counted * 8 / span / 1e6 if span > 0 else 0.0}


def tcp_send(host: str, port: int, seconds: float) -> dict[str, float]:
    payload = b"\0" * _CHUNK
    sent = 0
    with socket.create_connection((host, port), timeout=30) as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(payload)
            sent += len(payload)
    return {"bytes": sent}


def udp_echo(port: int) -> dict[str, float]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", port))
        print(json.dumps({"listening": port}), flush=True)
        while True:
            data, peer = sock.recvfrom(2048)
            if data == _END:
                return {}
            sock.sendto(data, peer)


def udp_ping(host: str, port: int, count: int, interval_s: float) -> dict[str, float]:
    """Round-trip times of `count` small datagrams, one every `interval_s` (so the link stays idle)."""
    rtts: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        sock.settimeout(max(1.0, 4 * interval_s))
        for seq in range(count):
            sent = time.monotonic()
            sock.send(struct.pack("!Id", seq, sent))
            deadline = sent + 1.0
            while time.monotonic() < deadline:
                try:
                    data = sock.recv(2048)
                except TimeoutError:
                    break
                got, _ = struct.unpack("!Id", data[:12])
                if got == seq:
                    rtts.append((time.monotonic() - sent) * 1000)
                    break
            time.sleep(max(0.0, sent + interval_s - time.monotonic()))
        sock.send(_END)
    return {
        "sent": count,
        "received": len(rtts),
        "median_ms": statistics.median(rtts) if rtts else 0.0,
        "min_ms": min(rtts, default=0.0),
        "max_ms": max(rtts, default=0.0),
        "p95_ms": sorted(rtts)[max(0, math.ceil(0.95 * len(rtts)) - 1)] if rtts else 0.0,
    }


def udp_count(port: int, idle_s: float) -> dict[str, float]:
    """Count distinct datagrams until `idle_s` passes with none (or an end marker arrives)."""
    seen: set[int] = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", port))
        print(json.dumps({"listening": port}), flush=True)
        sock.settimeout(60.0)
        while True:
            try:
                data = sock.recv(2048)
            except TimeoutError:
                break
            if data == _END:
                break
            seen.add(struct.unpack("!I", data[:4])[0])
            sock.settimeout(idle_s)
    return {"received": len(seen)}


def udp_blast(host: str, port: int, count: int, interval_s: float) -> dict[str, float]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        start = time.monotonic()
        for seq in range(count):
            sock.send(struct.pack("!I", seq) + b"\0" * 60)
            time.sleep(max(0.0, start + (seq + 1) * interval_s - time.monotonic()))
        for _ in range(20):  # the end marker can be lost too; the counter also stops when idle
            try:
                sock.send(_END)
            except ConnectionRefusedError:
                break  # the counter has stopped
            time.sleep(0.01)
    return {"sent": count}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = args[0], args[1:]
    if cmd == "tcp-sink":
        result = tcp_sink(int(rest[0]), float(rest[1]))
    elif cmd == "tcp-send":
        result = tcp_send(rest[0], int(rest[1]), float(rest[2]))
    elif cmd == "udp-echo":
        result = udp_echo(int(rest[0]))
    elif cmd == "udp-ping":
        result = udp_ping(rest[0], int(rest[1]), int(rest[2]), float(rest[3]))
    elif cmd == "udp-count":
        result = udp_count(int(rest[0]), float(rest[1]))
    elif cmd == "udp-blast":
        result = udp_blast(rest[0], int(rest[1]), int(rest[2]), float(rest[3]))
    else:
        print(f"unknown probe {cmd!r}\n{__doc__}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
