"""Network namespaces and TUN devices: creating a host's namespace, opening its TUN device, removing a testbed.

Everything that changes the machine's network state lives here, so that clean-up has one place to look. A
testbed NAME owns the namespaces `lnet.NAME.HOST` (the dot cannot occur in a name, so one testbed's prefix never
matches another's) and the state directory STATE_ROOT/NAME.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from .topology import Host, Topology

__all__ = [
    "NETNS_DIR",
    "STATE_ROOT",
    "TestbedError",
    "TestbedStateError",
    "check_privileges",
    "create_namespace",
    "emulator_alive",
    "kill_namespace_processes",
    "namespace_name",
    "namespaces_of",
    "open_tun",
    "remove_testbed",
    "setup_host",
    "tcp_sysctls",
]

NETNS_DIR = Path("/run/netns")
STATE_ROOT = Path(os.environ.get("LNET_TESTBED_STATE", "/run/lnet-testbed"))
TUN_NAME = "lnet0"
_CLONE_NEWNET = 0x40000000
_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_libc = ctypes.CDLL(None, use_errno=True)


class TestbedError(RuntimeError):
    """The testbed cannot be brought up, reached or torn down; the message says why."""

    __test__ = False  # not a pytest test class, despite the name


class TestbedStateError(TestbedError):
    """The named testbed is already up (when bringing it up) or is not up (when using it)."""


def namespace_name(testbed: str, host: str) -> str:
    return f"lnet.{testbed}.{host}"


def namespaces_of(testbed: str) -> list[str]:
    """The namespaces that exist now for a testbed (including any left by a crash)."""
    prefix = f"lnet.{testbed}."
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return []


def check_privileges() -> None:
    """Fail clearly, before anything is built, when this process cannot make namespaces and TUN devices."""
    if os.geteuid() != 0:
        userns = _user_namespaces_usable()
        raise TestbedError(
            f"the testbed needs root (it creates network namespaces and TUN devices); running as uid {os.geteuid()}"
            + (
                ". User namespaces are usable here, but lnet-testbed does not run rootless: use sudo."
                if userns
                else " and unprivileged user namespaces are not usable either: run it as root (sudo)."
            )
        )
    if shutil.which("ip") is None:
        raise TestbedError("the testbed needs the `ip` command (iproute2)")
    if not os.path.exists("/dev/net/tun"):
        raise TestbedError("the testbed needs /dev/net/tun (modprobe tun)")


def _user_namespaces_usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-Urn", "true"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """Run the body with this (single-threaded) process in another network namespace."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def open_tun(namespace: str) -> int:
    """Create the host's TUN device inside its namespace; it lives as long as the returned descriptor."""
    with inside(namespace):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", TUN_NAME.encode(), _IFF_TUN | _IFF_NO_PI))
        except OSError:
            os.close(fd)
            raise
    return fd


# Linux counts socket buffers in kernel memory (skb "truesize"), not payload, so the window a connection gets is
# not the buffer size. Measured over these TUN devices with a fixed receive buffer B (autotuning off):
# window ~ 0.632 * B - 1950 bytes at MTU 1500 and ~ 0.70 * B at MTU 9000 (12 KiB to 4 MiB; the ratio is the
# payload per byte of buffer, larger for jumbo frames; bench/testbed_window.py measures it).
# The topology's window is the payload a connection may have in flight, enforced where Linux enforces it
# cleanly, at the receiver: the receive buffer is sized by that fit and fixed (tcp_moderate_rcvbuf = 0, so no
# slow ramp). The send buffer gets twice the window: Linux's send-side limit is not a clean in-flight cap (a
# 12 KiB send buffer still lets 64 KB fly, 256 KiB lets 190 KB), so it is kept from binding first.
WINDOW_PER_RCVBUF_BYTE = {1500: 0.632, 9000: 0.695}  # interpolated linearly on the MTU between the two
RCVBUF_OVERHEAD_BYTES = 3085
WMEM_FACTOR = 2.0


def receive_buffer_bytes(window_bytes: int, mtu: int) -> int:
    (lo_mtu, lo), (hi_mtu, hi) = sorted(WINDOW_PER_RCVBUF_BYTE.items())
    frac = min(1.0, max(0.0, (mtu - lo_mtu) / (hi_mtu - lo_mtu)))
    return int(window_bytes / (lo + frac * (hi - lo)) + RCVBUF_OVERHEAD_BYTES)


def tcp_sysctls(host: Host, mtu: int) -> dict[str, str]:
    rcvbuf = receive_buffer_bytes(host.window_bytes, mtu)
    wmax = max(int(host.window_bytes * WMEM_FACTOR), 65536)
    return {
        "net/ipv4/tcp_rmem": f"4096 {rcvbuf} {rcvbuf}",
        "net/ipv4/tcp_wmem": f"4096 {min(16384, wmax)} {wmax}",
        "net/ipv4/tcp_moderate_rcvbuf": "0",
        "net/ipv4/tcp_congestion_control": host.congestion,
        # each connection starts afresh, as the seed's did: no metrics carried over from an earlier one
        "net/ipv4/tcp_no_metrics_save": "1",
        "net/ipv6/conf/all/disable_ipv6": "1",
        "net/ipv6/conf/default/disable_ipv6": "1",
    }


def allow_congestion_control(name: str) -> None:
    """A namespace other than the first may only choose a congestion control the machine allows
    (net.ipv4.tcp_allowed_congestion_control, a machine-wide setting); add ours if it is missing. This is the
    one change the testbed makes outside its namespaces, and it is only ever a widening, so it is left in place."""
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    names = allowed.read_text().split()
    if name in names:
        return
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if name not in available:
        # asking for it loads the module if the kernel has one
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    try:
        allowed.write_text(" ".join([*names, name]))
    except OSError as exc:
        raise TestbedError(f"congestion control {name!r} is not available on this kernel ({exc.strerror})") from exc


def create_namespace(testbed: str, topology: Topology, host: Host, forwarding: bool = False) -> str:
    """The host's namespace with its TCP settings (and IPv4 forwarding, for the kernel backend's routers)."""
    allow_congestion_control(host.congestion)
    ns = namespace_name(testbed, host.name)
    _ip(["netns", "add", ns])
    settings = tcp_sysctls(host, topology.mtu)
    if forwarding:
        settings |= {"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0",
                     "net/ipv4/conf/default/rp_filter": "0"}
    with inside(ns):
        for key, value in settings.items():
            Path("/proc/sys", key).write_text(value)
    return ns


def setup_host(testbed: str, topology: Topology, host: Host) -> int:
    """Create the host's namespace, its TUN device (returned), address and TCP settings."""
    ns = create_namespace(testbed, topology, host)
    fd = open_tun(ns)
    try:
        batch = "\n".join(
            [
                "link set lo up",
                f"link set {TUN_NAME} mtu {topology.mtu} txqueuelen 2000 up",
                f"addr add {host.address}/24 dev {TUN_NAME}",
            ]
        )
        _ip(["-n", ns, "-batch", "-"], stdin=batch)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ip(args: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def kill_namespace_processes(namespace: str, grace_s: float = 2.0) -> None:
    """SIGTERM every process in the namespace, then SIGKILL what is left after `grace_s`."""
    me = os.getpid()
    pids = [p for p in namespace_pids(namespace) if p != me]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if process_alive(p)]
        time.sleep(0.02)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (whatever it runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def emulator_alive(pid: int, testbed: str) -> bool:
    """Whether `pid` is still this testbed's emulator (and not a recycled pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"lnet.testbed.emulator" in argv and testbed.encode() in argv and process_alive(pid)


def remove_testbed(testbed: str, state_root: Path = STATE_ROOT) -> list[str]:
    """Remove every trace of a testbed: its processes, namespaces (and with them TUN devices, addresses and
    routes) and state directory. Idempotent; returns the namespaces it removed."""
    removed = []
    for ns in namespaces_of(testbed):
        kill_namespace_processes(ns)
        for attempt in range(50):
            done = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True, check=False)
            if done.returncode == 0 or not (NETNS_DIR / ns).exists():
                break
            if attempt == 49:
                raise TestbedError(f"cannot remove namespace {ns}: {done.stderr.strip()}")
            time.sleep(0.1)
        removed.append(ns)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(state_root / testbed)
    return removed

