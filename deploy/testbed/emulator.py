"""The userspace link emulator: one process that owns a testbed's namespaces and carries every packet between them.

Each host namespace has one TUN device (`lnet0`, 10.77.0.x/24). A packet a host sends to another host's address
comes out of its TUN device here; the emulator looks up the shortest-delay route, passes the packet through each
link direction on it in turn (`LinkDirection`: queue, serialisation, loss, delay, jitter) as a backbone of
forwarding hosts would, and writes it into the destination's TUN device at the time the last link delivers it.

One epoll loop over non-blocking TUN descriptors and a timer heap; no threads. Run as
`python -m lnet.testbed.emulator NAME STATE_ROOT`, by `Testbed` (attached: it dies with its parent) or by
`lnet-testbed up` (detached). Whichever way it ends (SIGTERM, SIGINT, SIGHUP, parent death, an error) it removes
the testbed before exiting; `netns.remove_testbed` cleans up after a SIGKILL.

It must not do anything per packet beyond a dict lookup, the link model and a heap push: it is the bottleneck
of every benchmark if it is slow.
"""

from __future__ import annotations

import contextlib
import ctypes
import heapq
import json
import os
import random
import select
import signal
import socket
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .linkmodel import LinkDirection
from .netem import plan_commands, reshape_commands, run_commands
from .netns import TestbedError, create_namespace, namespace_name, remove_testbed, setup_host
from .topology import Link, Topology, TopologyError, validate_link

__all__ = ["COMPENSATE_S", "Emulator", "MEASURED_AGGREGATE_MBIT", "main"]

# Aggregate Mbit/s one emulator process carried on the 2-core development machine while a 40 ms round trip on
# another link still measured within 2%, by MTU: `python bench/testbed_emulator.py --mtu 9000 --pairs 1,2` and
# `--mtu 1500 --rate-mbit 1000 --pairs 1,2` (docs/testbed.md has the runs). Reported by `status`.
MEASURED_AGGREGATE_MBIT = {1500: 960.0, 9000: 3970.0}


def sustained_mbit(mtu: int) -> float:
    """The measured figure for the nearest measured MTU at or below `mtu` (the smallest one below them all)."""
    below = [m for m in MEASURED_AGGREGATE_MBIT if m <= mtu]
    return MEASURED_AGGREGATE_MBIT[max(below) if below else min(MEASURED_AGGREGATE_MBIT)]
_READ_BATCH = 64
_MAX_PACKET = 65536
_LOAD_WINDOW_S = 5.0

# -- timing (docs/testbed.md, "Timing") --
# epoll sleeps in whole milliseconds, rounded up: a deadline 4.6 ms away woke after 5 ms. So the loop sleeps
# in epoll only while a deadline is far (rounded down: early), and waits out the last _FINE_S with select, whose
# timeout has microseconds. A wake-up still comes late by the kernel's and the interpreter's latency, learnt as
# it goes (`Emulator.lead_s`, the smoothed lateness of timed waits): the loop wakes that much before a deadline
# and delivers what is due within it, so that deliveries centre on their time without spinning while it waits.
_FINE_S = 0.002
_LEAD_START_S = 0.00005
_LEAD_MAX_S = 0.0005
# What carrying a packet costs beyond the configured delay, once per route: the sender's kernel queues it on its
# TUN device, the emulator reads it and writes it into the receiver's, whose kernel hands it to the socket. It is
# taken off each packet's delivery time, never below the time the packet was read (so a 0 ms link keeps it).
# Measured on the 2-core development machine with the timing above and no compensation, as half the excess of a
# 5 ms link's round trip over 10 ms plus the same probes' round trip to themselves (bench/testbed_overhead.py,
# median of 300-1500 round trips, four sessions: 17 to 63 us, median 35 us; over a 0 ms link 51 to 126 us).
# LNET_TESTBED_COMPENSATE_US overrides it (0: off).
COMPENSATE_S = 0.00004


class Emulator:
    def __init__(self, name: str, topology: Topology, state_dir: Path, seed: int | None = None,
                 parent: int | None = None, backend: str = "userspace", compensate_s: float = COMPENSATE_S) -> None:
        self.name = name
        self.compensate_s = compensate_s
        self.lead_s = _LEAD_START_S  # how late a timed wake-up comes, smoothed: waits are shortened by it
        self.lateness = (0.0, 0)  # seconds late, summed over the packets delivered, and their count
        # "userspace": this process carries the packets; "netem": the kernel does (veths + tc), and this
        # process only owns the namespaces and serves the control socket; "netem-unshaped": netem's plumbing
        # without the tc lines, to check it on a kernel without netem
        self.backend = backend
        # Attached to a controlling process: end when it does. Polled, because PR_SET_PDEATHSIG fires when the
        # *thread* that forked us ends, and trio forks from worker threads that idle out after 10 s.
        self.parent = parent
        self.topology = topology
        self.state_dir = state_dir
        self.rng = random.Random(seed)
        self.fds: dict[str, int] = {}
        self.directions: dict[tuple[str, str], LinkDirection] = {}
        for link in topology.links:
            self.directions[(link.a, link.b)] = LinkDirection(link, self.rng)
            self.directions[(link.b, link.a)] = LinkDirection(link, self.rng)
        self.stop = False
        self.started = time.monotonic()
        self.samples: list[tuple[float, float, int]] = []  # (monotonic, cpu seconds, bytes delivered)
        self.delivered_bytes = 0
        self.unroutable = 0

    # -- set-up ----------------------------------------------------------------------------------
    def build(self) -> None:
        if self.backend == "userspace":
            for host in self.topology.hosts:
                self.fds[host.name] = setup_host(self.name, self.topology, host)
            return
        for host in self.topology.hosts:
            create_namespace(self.name, self.topology, host, forwarding=True)
        run_commands(plan_commands(self.name, self.topology, shape=self.backend == "netem"))

    def routes(self) -> dict[int, dict[bytes, tuple[list[LinkDirection], int]]]:
        """For each source TUN descriptor: destination address (4 bytes) -> (link directions, destination fd)."""
        table: dict[int, dict[bytes, tuple[list[LinkDirection], int]]] = {}
        if self.backend != "userspace":
            return table  # the kernel carries the packets
        for src in self.topology.hosts:
            row: dict[bytes, tuple[list[LinkDirection], int]] = {}
            for dst in self.topology.hosts:
                if dst is src:
                    continue
                path = self.topology.route(src.name, dst.name)
                hops = [self.directions[(a, b)] for a, b in zip(path, path[1:], strict=False)]
                row[socket.inet_aton(dst.address)] = (hops, self.fds[dst.name])
            table[self.fds[src.name]] = row
        return table

    # -- the loop --------------------------------------------------------------------------------
    def run(self, control: socket.socket, wakeup: int) -> None:
        routes = self.routes()
        heap: list[tuple[float, int, bytes, list[LinkDirection], int, int]] = []
        seq = 0
        ep = select.epoll()
        for fd in routes:
            ep.register(fd, select.EPOLLIN)
        ep.register(control.fileno(), select.EPOLLIN)
        ep.register(wakeup, select.EPOLLIN)
        control_fd = control.fileno()
        watched = [*routes, control_fd, wakeup]
        monotonic = time.monotonic
        push = heapq.heappush
        pop = heapq.heappop
        read = os.read
        write = os.write
        compensate = self.compensate_s
        late_sum, late_n = self.lateness
        next_sample = monotonic()
        while not self.stop:
            now = monotonic()
            target = 0.0
            if heap:
                wait = heap[0][0] - now - self.lead_s
                if wait <= 0:
                    ready = ep.poll(0)
                elif wait < _FINE_S:
                    target = now + wait
                    ready = [(fd, 0) for fd in select.select(watched, [], [], wait)[0]]
                else:
                    # whole milliseconds (epoll rounds up), at least one short of the deadline: the rest finely
                    ready = ep.poll(min(1000, int((wait - 0.001) * 1000)) / 1000 - 1e-6)
            else:
                ready = ep.poll(1.0)
            if target and not ready:
                woke = monotonic() - target  # a timed wait that ran out: how late did it end?
                self.lead_s += 0.05 * ((woke if woke < _LEAD_MAX_S else _LEAD_MAX_S) - self.lead_s)
            for fd, _ in ready:
                if fd in routes:
                    row = routes[fd]
                    now = monotonic()
                    for _ in range(_READ_BATCH):
                        try:
                            pkt = read(fd, _MAX_PACKET)
                        except BlockingIOError:
                            break
                        route = row.get(pkt[16:20])
                        if route is None or pkt[0] >> 4 != 4:
                            self.unroutable += 1
                            continue
                        hops, out = route
                        at = hops[0].admit(now, len(pkt))
                        if at is not None:
                            at -= compensate  # once per route: the cost of carrying it, paid meanwhile
                            seq += 1
                            push(heap, (at if at > now else now, seq, pkt, hops, 1, out))
                elif fd == control_fd:
                    self.serve_control(control)
                elif fd == wakeup:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wakeup, 512)
            now = monotonic()
            due = now + self.lead_s
            while heap and heap[0][0] <= due:
                at, _, pkt, hops, hop, out = pop(heap)
                if hop < len(hops):
                    # the next link sees the packet arrive when the previous one delivered it, not when
                    # this loop got round to it, so lateness does not accumulate along a route
                    nxt = hops[hop].admit(at, len(pkt))
                    if nxt is not None:
                        seq += 1
                        push(heap, (nxt, seq, pkt, hops, hop + 1, out))
                    continue
                late_sum += now - at
                late_n += 1
                try:
                    write(out, pkt)
                    self.delivered_bytes += len(pkt)
                except BlockingIOError:
                    pass  # the host's stack is full; a real NIC would drop too
                except OSError:
                    pass  # e.g. the interface is going down during teardown
            if now >= next_sample:
                self.lateness = (late_sum, late_n)
                if self.parent is not None and os.getppid() != self.parent:
                    self.stop = True
                self.samples.append((now, time.process_time(), self.delivered_bytes))
                self.samples = self.samples[-int(_LOAD_WINDOW_S * 2) - 2 :]
                next_sample = now + 0.5

    # -- control ---------------------------------------------------------------------------------
    def serve_control(self, control: socket.socket) -> None:
        try:
            conn, _ = control.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                data = b""
                while not data.endswith(b"\n") and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                reply = self.handle(json.loads(data))
            except (OSError, ValueError) as exc:
                reply = {"ok": False, "error": f"bad request: {exc}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return {"ok": True, "status": self.status()}
        if op == "set_link":
            try:
                self.set_link(request)
            except TopologyError as exc:
                return {"ok": False, "error": str(exc), "kind": "topology"}
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def set_link(self, request: dict[str, Any]) -> None:
        a, b = str(request.get("a")), str(request.get("b"))
        link = self.topology.link(a, b)
        keys = ("delay_ms", "rate_mbit", "loss", "jitter_ms", "queue_ms")
        changes = {k: request[k] for k in keys if request.get(k) is not None}  # None: unchanged
        for key, value in changes.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TopologyError(f"{key} must be a number, got {value!r}")
        new = Link(**{**asdict(link), **{k: float(v) for k, v in changes.items()}})
        validate_link(new, f"link {a}-{b}")
        if self.backend == "netem":
            try:
                run_commands(reshape_commands(self.name, self.topology, new))
            except TestbedError as exc:
                raise TopologyError(f"link {a}-{b}: {exc}") from exc
        self.topology = self.topology.with_link(new)
        # routes stay as they were at `up`: like a backbone's routing metrics, they are configuration
        self.directions[(new.a, new.b)].configure(new)
        self.directions[(new.b, new.a)].configure(new)

    def status(self) -> dict[str, Any]:
        links = []
        for link in self.topology.links:
            row: dict[str, Any] = asdict(link)
            row["queue_ms"] = link.effective_queue_ms
            for a, b in ((link.a, link.b), (link.b, link.a)):
                row[f"{a}->{b}"] = asdict(self.directions[(a, b)].stats)
            links.append(row)
        cpu_percent = mbit = 0.0
        if len(self.samples) >= 2:
            t0, c0, b0 = self.samples[0]
            t1, c1, b1 = self.samples[-1]
            if t1 > t0:
                cpu_percent = 100.0 * (c1 - c0) / (t1 - t0)
                mbit = (b1 - b0) * 8 / (t1 - t0) / 1e6
        return {
            "name": self.name,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 1),
            "backend": self.backend,
            "hosts": [
                {"name": h.name, "address": h.address, "namespace": namespace_name(self.name, h.name),
                 "window_bytes": h.window_bytes, "congestion": h.congestion}
                for h in self.topology.hosts
            ],
            "links": links,
            "load": {
                "cpu_percent": round(cpu_percent, 1),
                "delivered_mbit_s": round(mbit, 2),
                "window_s": _LOAD_WINDOW_S,
                "cpu_seconds": round(time.process_time(), 2),
                "unroutable_packets": self.unroutable,
                "sustains_mbit_s": sustained_mbit(self.topology.mtu),
                "mtu": self.topology.mtu,
            },
            "timing": {
                "compensate_ms": round(self.compensate_s * 1000, 4),
                "wake_lead_ms": round(self.lead_s * 1000, 4),
                "late_ms_mean": round(self.lateness[0] / self.lateness[1] * 1000, 4) if self.lateness[1] else 0.0,
                "delivered_packets": self.lateness[1],
            },
        }


def _fine_timer_slack() -> None:
    """Timed waits end within a microsecond of when asked, not the default 50 (prctl PR_SET_TIMERSLACK)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)


def main(argv: list[str] | None = None) -> int:
    """`python -m lnet.testbed.emulator NAME STATE_ROOT [--parent PID] [--ready-fd FD] [--seed N]
    [--backend userspace|netem|netem-unshaped] [--daemon]`.

    Reads STATE_ROOT/NAME/topology.json, builds the testbed, writes one JSON line to the ready descriptor
    (`{"ok": true}` or `{"ok": false, "error": ...}`), serves until signalled, then removes the testbed."""
    args = list(sys.argv[1:] if argv is None else argv)
    name, state_root = args[0], Path(args[1])
    opts = dict(zip(args[2::2], args[3::2], strict=False))
    state_dir = state_root / name
    ready_fd = int(opts.get("--ready-fd", "-1"))

    def ready(message: dict[str, Any]) -> None:
        nonlocal ready_fd
        if ready_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(ready_fd, json.dumps(message).encode() + b"\n")
                os.close(ready_fd)
            ready_fd = -1

    if "--daemon" in args:
        # detach for `lnet-testbed up`: the caller waits for this first process, the testbed lives on in a
        # grandchild that no shell or caller owns
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
        args.remove("--daemon")
        opts = dict(zip(args[2::2], args[3::2], strict=False))
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    emulator: Emulator | None = None

    def on_signal(signum: int, frame: object) -> None:
        if emulator is not None:
            emulator.stop = True

    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -5)  # keep delays accurate on a busy machine
    _fine_timer_slack()
    code = 0
    try:
        (state_dir / "state.json").write_text(
            json.dumps({"name": name, "pid": os.getpid(), "started": time.time(), "attached": "--parent" in opts})
        )
        topology = Topology.from_dict(json.loads((state_dir / "topology.json").read_text()))
        parent = int(opts["--parent"]) if "--parent" in opts else None
        seed = int(opts["--seed"]) if "--seed" in opts else None
        backend = opts.get("--backend", "userspace")
        compensate_s = float(os.environ.get("LNET_TESTBED_COMPENSATE_US", COMPENSATE_S * 1e6)) / 1e6
        emulator = Emulator(name, topology, state_dir, seed=seed, parent=parent, backend=backend,
                            compensate_s=max(0.0, compensate_s))
        emulator.build()
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.bind(str(state_dir / "control.sock"))
        control.listen(16)
        control.setblocking(False)
        if parent is not None and os.getppid() != parent:
            emulator.stop = True
        if not emulator.stop:
            ready({"ok": True, "pid": os.getpid()})
            emulator.run(control, wake_r)
    except (TestbedError, TopologyError, OSError) as exc:
        ready({"ok": False, "error": str(exc)})
        print(f"lnet-testbed emulator {name}: {exc}", file=sys.stderr)
        code = 1
    except BaseException as exc:
        ready({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        traceback.print_exc()
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if emulator is not None:
            for fd in emulator.fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
        remove_testbed(name, state_root)
    return code


if __name__ == "__main__":
    sys.exit(main())
