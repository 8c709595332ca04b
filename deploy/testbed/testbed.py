"""`Testbed`: bring a topology up as network namespaces joined by the link emulator, run programs on its hosts,
change links while they run, and tear it all down.

The emulator process owns the machine state (namespaces, TUN devices) and removes it whenever it ends; this
module starts it, talks to it over its control socket, and cleans up after it if it was killed. The same start
and stop code serves the Python API (emulator attached: it dies with us) and the CLI (`up` leaves it running).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import trio

from .compose import link_address
from .netem import kernel_has_netem
from .netns import (
    STATE_ROOT,
    TestbedError,
    TestbedStateError,
    check_privileges,
    emulator_alive,
    namespace_name,
    namespaces_of,
    process_alive,
    remove_testbed,
)
from .topology import Topology, TopologyError

__all__ = ["Testbed", "TestbedError", "running_testbeds", "start_detached", "stop", "control_request"]

SETUP_TIMEOUT_S = 60.0
CONTROL_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 30.0


def _as_topology(topology: Topology | str | os.PathLike[str]) -> Topology:
    return topology if isinstance(topology, Topology) else Topology.load(topology)


def emulator_pid(name: str, state_root: Path = STATE_ROOT) -> int | None:
    """The running emulator of testbed `name`, or None."""
    try:
        state = json.loads((state_root / name / "state.json").read_text())
    except (OSError, ValueError):
        return None
    pid = state.get("pid")
    return pid if isinstance(pid, int) and emulator_alive(pid, name) else None


def running_testbeds(state_root: Path = STATE_ROOT) -> list[str]:
    try:
        names = sorted(p.name for p in state_root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []
    return [n for n in names if emulator_pid(n, state_root) is not None]


def prepare(name: str, topology: Topology, state_root: Path) -> Path:
    """Refuse if `name` is up; remove what a crashed one left; write the topology for the emulator to read."""
    check_privileges()
    pid = emulator_pid(name, state_root)
    if pid is not None:
        raise TestbedStateError(
            f"a testbed named {name!r} is already up (emulator pid {pid}); "
            f"take it down first: lnet-testbed down --name {name}"
        )
    if (state_root / name).exists() or namespaces_of(name):
        remove_testbed(name, state_root)  # stale: its emulator is gone
    state_dir = state_root / name
    state_dir.mkdir(parents=True)
    (state_dir / "topology.json").write_text(json.dumps(topology.to_dict()))
    return state_dir


BACKENDS = ("auto", "userspace", "netem", "netem-unshaped")


def resolve_backend(backend: str) -> str:
    """"auto": the kernel's netem where there is one, else the userspace emulator. ("netem-unshaped" builds the
    netem backend's veths and routes without tc, to check that plumbing where netem is missing.)"""
    if backend not in BACKENDS:
        raise TestbedError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS[:3])}")
    if backend == "auto":
        return "netem" if kernel_has_netem() else "userspace"
    if backend == "netem" and not kernel_has_netem():
        raise TestbedError("this kernel has no netem qdisc (sch_netem): use the userspace backend")
    return backend


def _emulator_argv(name: str, state_root: Path, ready_fd: int, parent: int | None, seed: int | None,
                   backend: str) -> list[str]:
    argv = [sys.executable, "-m", "lnet.testbed.emulator", name, str(state_root), "--ready-fd", str(ready_fd),
            "--backend", backend]
    if parent is not None:
        argv += ["--parent", str(parent)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return argv


def _ready_message(line: bytes, name: str) -> int:
    try:
        message = json.loads(line)
    except ValueError:
        message = {"ok": False, "error": "the emulator exited during set-up (see its stderr)"}
    if not message.get("ok"):
        raise TestbedError(f"testbed {name!r} failed to come up: {message.get('error')}")
    return int(message["pid"])


def start_detached(topology: Topology, name: str | None = None, state_root: Path = STATE_ROOT,
                   seed: int | None = None, backend: str = "auto", setup_timeout_s: float = SETUP_TIMEOUT_S) -> int:
    """Bring a testbed up and leave it running after this process exits (`lnet-testbed up`). Returns the
    emulator's pid. An emulator that has not reported within `setup_timeout_s` fails it (as `Testbed` does)."""
    name = name or topology.name
    check_privileges()
    backend = resolve_backend(backend)
    state_dir = prepare(name, topology, state_root)
    r, w = os.pipe()
    log = open(state_dir / "emulator.log", "ab")  # handed to the child, closed here once it has it
    try:
        subprocess.run(
            [*_emulator_argv(name, state_root, w, None, seed, backend), "--daemon"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(w,), start_new_session=True, check=True,
        )
    finally:
        os.close(w)
        log.close()
    try:
        return _ready_message(_ready_line(r, setup_timeout_s), name)
    except BaseException:
        stop(name, state_root)
        raise


def _ready_line(fd: int, timeout_s: float) -> bytes:
    """The emulator's ready line from the pipe `fd` (closed here), waited for `timeout_s` at most; what came
    before the pipe closed if it closed first."""
    deadline = time.monotonic() + timeout_s
    line = b""
    with os.fdopen(fd, "rb", buffering=0) as ready:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([ready], [], [], left)[0]:
                raise TestbedError(f"the emulator did not report within {timeout_s:g} s (see emulator.log)")
            chunk = ready.read(4096)
            if not chunk:
                break
            line += chunk
    return line


def stop(name: str, state_root: Path = STATE_ROOT, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Take testbed `name` down, whether its emulator runs or crashed. Returns False if there was nothing."""
    pid = emulator_pid(name, state_root)
    found = pid is not None or (state_root / name).exists() or bool(namespaces_of(name))
    if pid is not None and emulator_alive(pid, name):
        # Known to be the emulator now; from here on its pid is waited on as a process: an exiting process's
        # command line reads empty before the process is gone, and `down` returns only once it is.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    remove_testbed(name, state_root)
    return found


def control_request(name: str, request: dict[str, Any], state_root: Path = STATE_ROOT) -> dict[str, Any]:
    """One request to a running emulator's control socket (blocking; for the CLI)."""
    if emulator_pid(name, state_root) is None:
        raise TestbedStateError(f"no testbed named {name!r} is up")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONTROL_TIMEOUT_S)
        sock.connect(str(state_root / name / "control.sock"))
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return _reply(data)


def _reply(data: bytes) -> dict[str, Any]:
    try:
        reply: dict[str, Any] = json.loads(data)
    except ValueError as exc:
        raise TestbedError(f"the emulator gave no answer ({exc})") from exc
    if not reply.get("ok"):
        if reply.get("kind") == "topology":
            raise TopologyError(str(reply.get("error")))
        raise TestbedError(str(reply.get("error")))
    return reply


class Testbed:
    """A topology brought up on this machine for as long as the `async with` block runs.

    ```
    async with Testbed("deploy/topologies/line3.toml", name="ci") as tb:
        server = await tb.spawn("dst", ["python3", "-m", "http.server", "8000"])
        got = await tb.run("src", ["curl", "-s", f"http://{tb.address('dst')}:8000/"])
        await tb.set_link("src", "depot", loss=0.01)
    ```
    Everything is removed on exit, on cancellation and on KeyboardInterrupt; if this process is killed, the
    emulator notices and removes the testbed itself.
    """

    __test__ = False

    def __init__(self, topology: Topology | str | os.PathLike[str], name: str | None = None, *,
                 state_root: Path = STATE_ROOT, seed: int | None = None, backend: str = "auto",
                 setup_timeout_s: float = SETUP_TIMEOUT_S) -> None:
        self.topology = _as_topology(topology)
        self.name = name or self.topology.name
        self.state_root = Path(state_root)
        self.seed = seed
        self.backend = backend
        self.setup_timeout_s = setup_timeout_s
        self._emulator: trio.Process | None = None
        self._processes: list[trio.Process] = []

    # -- hosts -----------------------------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        return self.topology.host_names

    def address(self, host: str) -> str:
        return self.topology.host(host).address

    def namespace(self, host: str) -> str:
        self.topology.host(host)
        return namespace_name(self.name, host)

    def link_address(self, host: str, neighbour: str) -> str:
        """Under the netem backend a host also has one address per link; this is the one facing `neighbour`."""
        key = self.topology.link(host, neighbour).key
        i = next(k for k, link in enumerate(self.topology.links) if link.key == key)
        return link_address(i, "a" if self.topology.links[i].a == host else "b")

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """The command line that runs `argv` on `host` (for callers that start processes themselves)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    async def spawn(self, host: str, argv: list[str], **kwargs: Any) -> trio.Process:
        """Start `argv` in the host's namespace; it is terminated (then killed) when the testbed exits."""
        self._check_up()
        proc = await trio.lowlevel.open_process(self.exec_argv(host, argv), **kwargs)
        self._processes.append(proc)
        return proc

    async def run(self, host: str, argv: list[str], *, check: bool = True, capture_output: bool = True,
                  **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """Run `argv` on `host` to completion (trio.run_process in the host's namespace)."""
        self._check_up()
        if capture_output:
            kwargs.setdefault("capture_stdout", True)
            kwargs.setdefault("capture_stderr", True)
        return await trio.run_process(self.exec_argv(host, argv), check=check, **kwargs)

    # -- links -----------------------------------------------------------------------------------
    async def set_link(self, a: str, b: str, *, delay_ms: float | None = None, rate_mbit: float | None = None,
                       loss: float | None = None, jitter_ms: float | None = None,
                       queue_ms: float | None = None) -> None:
        """Change a link (both directions) while traffic flows; None leaves a parameter as it is. Packets
        already on the link keep their times; routes do not change."""
        self.topology.link(a, b)
        request = {"op": "set_link", "a": a, "b": b, "delay_ms": delay_ms, "rate_mbit": rate_mbit, "loss": loss,
                   "jitter_ms": jitter_ms, "queue_ms": queue_ms}
        await self._request(request)
        link = self.topology.link(a, b)
        self.topology = self.topology.with_link(dataclasses.replace(
            link,
            delay_ms=link.delay_ms if delay_ms is None else float(delay_ms),
            rate_mbit=link.rate_mbit if rate_mbit is None else float(rate_mbit),
            loss=link.loss if loss is None else float(loss),
            jitter_ms=link.jitter_ms if jitter_ms is None else float(jitter_ms),
            queue_ms=link.queue_ms if queue_ms is None else float(queue_ms),
        ))

    async def status(self) -> dict[str, Any]:
        """Hosts, links with per-direction counters, and the emulator's load."""
        reply = await self._request({"op": "status"})
        status: dict[str, Any] = reply["status"]
        return status

    async def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check_up()
        with trio.fail_after(CONTROL_TIMEOUT_S):
            stream = await trio.open_unix_socket(str(self.state_root / self.name / "control.sock"))
            async with stream:
                await stream.send_all(json.dumps(request).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    data += chunk
        return _reply(data)

    def _check_up(self) -> None:
        if self._emulator is None or self._emulator.returncode is not None:
            raise TestbedError(f"testbed {self.name!r} is not up")

    # -- lifetime --------------------------------------------------------------------------------
    async def __aenter__(self) -> Testbed:
        check_privileges()
        self.backend = resolve_backend(self.backend)
        prepare(self.name, self.topology, self.state_root)
        r, w = os.pipe()
        try:
            self._emulator = await trio.lowlevel.open_process(
                _emulator_argv(self.name, self.state_root, w, os.getpid(), self.seed, self.backend),
                stdin=subprocess.DEVNULL, pass_fds=(w,),
            )
        except BaseException:
            os.close(r)
            remove_testbed(self.name, self.state_root)
            raise
        finally:
            os.close(w)
        try:
            ready = trio.lowlevel.FdStream(r)
            async with ready:
                with trio.fail_after(self.setup_timeout_s):
                    line = b""
                    while not line.endswith(b"\n"):
                        chunk = await ready.receive_some(4096)
                        if not chunk:
                            break
                        line += chunk
            _ready_message(line, self.name)
        except BaseException:
            await self._teardown()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._teardown()

    async def _teardown(self) -> None:
        with trio.CancelScope(shield=True):
            for proc in self._processes:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
            for proc in self._processes:
                with trio.move_on_after(3.0):
                    await proc.wait()
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            self._processes.clear()
            emulator, self._emulator = self._emulator, None
            if emulator is not None and emulator.returncode is None:
                emulator.send_signal(signal.SIGTERM)
                with trio.move_on_after(STOP_TIMEOUT_S):
                    await emulator.wait()
                if emulator.returncode is None:
                    emulator.kill()
                    await emulator.wait()
            # the emulator removes everything itself; this covers one that was killed
            await trio.to_thread.run_sync(remove_testbed, self.name, self.state_root)
