"""lnet-get's multi-source download against aria2c on the replicas testbed (the multi-source work), with real nginx
replicas.

    flock /tmp/lnet-testbed.lock ./run bench multisource [--quick] [--sizes 64MiB,256MiB,1GiB]
        [--scenarios normal,latency,throttled,slowdown,dies] [--competitors aria2-fair,aria2-default,mdtp,...]
        [--large-competitors aria2-fair,aria2-default,mdtp] [--runs 3] [--capacity-seconds 15]
        [--sweep-tail split,hedge] [--sweep-depth 1,2,3] [--lnet-arg=--tail=hedge ...]

Needs root (the testbed). On deploy/topologies/replicas.toml (testbed name `multisrc`): one nginx (Debian's
package) in each replica's namespace r1..r6, all serving the same file (one path, so the same bytes, the same
size and mtime, hence the same ETag and Last-Modified everywhere; checked with a HEAD to each before the runs),
`sendfile on`, keep-alive 300 s and 100000 requests per connection. nginx and aria2c are installed with apt-get
when missing (Debian's `nginx` and `aria2` packages). The time the plan will take is printed first.

Competitors, run in the `client` namespace, one after the other and interleaved within each repetition (aria2
fair, aria2 default, lnet mdtp, lnet static, ..., then again), so that drift on this 2-core machine hits all alike:
  aria2-fair  aria2c with the fair flags (--split=N for N replicas, 6 on replicas.toml,
              --max-connection-per-server=1 --min-split-size=1M
              --piece-length=1M --uri-selector=inorder --lowest-speed-limit=0: one connection per mirror, like
              lnet), plus only what running it unattended needs (--no-conf, --allow-overwrite,
              --file-allocation=none, quiet console). Its retry defaults are left alone. It is not given the
              checksum: it would hash after the download, lnet hashes alongside. (`aria2` is the same.)
  aria2-default
              `aria2c URL...` with only the unattended flags: what a user who types aria2c gets.
  mdtp, static, brute, history, aggressive
              lnet-get URL x6 -o OUT --strategy S --sha256 HEX --json --no-progress --history FILE (plus any
              --lnet-arg). FILE (remembered replica throughputs) starts empty and lives as long as the
              benchmark, across scenarios: `history` plans from what earlier runs measured, stale after a change.
  mdtp:tail=T:depth=D
              lnet mdtp with --tail T --depth D (requests outstanding per replica): --sweep-tail and --sweep-depth
              add one such competitor per combination other than the default (split, 2), beside plain mdtp.
Every run is timed the same way, the whole process's wall clock (`ip netns exec` included); lnet's own
`seconds` is recorded beside it. After each run the output's size and sha256 are checked (outside the timing).

Scenarios (set with the testbed's set_link on the isp-r1 link, both directions):
  normal      the topology as it is.
  latency     +500 ms round trip to the fastest replica r1: its link's one-way delay_ms (applied in each
              direction) goes from 5 to 255 ms, so the client-r1 RTT goes from 12 to 512 ms. The link's queue
              follows (the topology leaves queue_ms to its default, one link RTT).
  throttled   r1's link rate at a quarter: 40 -> 10 Mbit/s (the replicas' sum 140 -> 110 Mbit/s).
  slowdown    r1 at full rate until half time, then at a quarter (set_link while the run goes on); back after it.
  dies        r1's nginx killed (SIGKILL, master and worker) at half time; started again after the run.
"Half time" is half the run's physical-limit time, counted from the competitor's start.
Physical limit: min(sum of the replicas' link rates, the client's access link 200 Mbit/s). Link rates count IP
packets; at MTU 9000 TCP payload is about 99.4% of that. In slowdown and dies, half the file at the limit
before the change and half at the limit after it (the harmonic mean of the two rates). Before the runs each
replica's real capacity is measured alone with one plain curl (a range of about --capacity-seconds at its link
rate; 0 skips; r1 again in each changed scenario), and the sum is shown as the reachable limit.
Round-trip floor ("floor s"): the earliest any client could hold the file if it took no time to start and TCP
had no slow start. Each replica's first byte comes two round trips after the start (the handshake, then the
request); from then on it sends at its link rate times the TCP payload share at the MTU (1 - 52/MTU), and r1
changes when that run's change was done (its recorded time). The floor is a lower bound, for aria2 as for lnet.
A speedup target that asks for a time below it is marked unreachable beside MISSED.

Every replica's share of each run comes from its nginx access log ($body_bytes_sent of the requests that run
made), the same measure for all competitors; the bytes all replicas sent over the file's size is the over-fetch
(aborted or duplicated requests; bytes still in socket buffers when a client hangs up count as sent). lnet's own
per-replica report is recorded too, with its --trace (every range request: sent, first and last byte, how it
ended) and, on the run's line, how close together the replicas' last bytes came (MDTP wants them together).

Targets, for lnet mdtp in each scenario and size: never slower than aria2 fair; >= 1.15x aria2 fair
where aria2 fair reaches less than 85% of the physical limit; >= 1.25x aria2 default; in normal, >= 97% of the
physical limit at 256 MiB and above and >= 85% below; every replica used (every replica's bytes > 0 in lnet's
report) in every run; identical bytes in every run of every competitor.

Default plan: every competitor at sizes below 1 GiB, --large-competitors at 1 GiB and above, 3 repetitions,
medians reported; the estimate is printed before anything starts (a few hours for everything: pick scenarios).
A smoke test: --quick (64MiB, one run, no capacity curls). Progress one line per run; at the end a table, the
targets met/missed and one JSON line; everything is saved to bench/results/multisource-<timestamp>.json. The
benchmark holds /tmp/lnet-testbed.lock while it runs, as every testbed test and benchmark does (it takes it
itself unless started under `flock /tmp/lnet-testbed.lock`), so two never overlap. nginx, the testbed and the
temporary files are removed however it ends (Ctrl-C included).

Random replica sets:

    flock /tmp/lnet-testbed.lock ./run bench multisource --random 12 [--seed S] [--sizes 64MiB] [--runs 3]
        [--only 3,7] [--lnet-arg=...]

N sets from lnet.testbed.replica_sets.replica_set(S, 0..N-1) (3-8 replicas, their rates and round trips, the
access link the bottleneck or not, one replica that slows or dies at a drawn time; its docstring has the ranges);
the seed is a fresh one unless given, and is printed first with the command that reruns it. Each set gets its own
testbed (same name, same hosts client, isp, r1..rN, so the same nginx, runs and measures as above) and runs aria2
fair and lnet mdtp, interleaved, --runs times at each size (default 64MiB); --capacity-seconds does not apply.
lnet's remembered rates start empty in each set. The oracles: the set's physical limit (its event included,
at the drawn fraction of the limit's time instead of half time) and aria2 fair. Printed: a line per set and size
(median times, lnet/fair, each over the limit, lnet's over-fetch, and which replica held lnet's tail), the
distribution of each ratio over the sets (median, 10th percentile, min), and the random sets' targets: lnet mdtp at
least 1.15x aria2 fair at the median and never below 1.0x, and at least 90% of the physical limit at the median
at 256 MiB and above. Saved: bench/results/multisource-random-<seed>-<timestamp>.json (the seed, the command,
every set's topology and every run) and a CDF plot of each ratio beside it (.png; matplotlib, the `plot` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.testbed import Testbed  # noqa: E402
from lnet.testbed.replica_sets import ReplicaSet, replica_set  # noqa: E402
from lnet.units import parse_size  # noqa: E402

TOPOLOGY = REPO / "deploy" / "topologies" / "replicas.toml"
TESTBED_NAME = "multisrc"
CLIENT = "client"
EDGE = "isp"
FASTEST = "r1"
PORT = 8080
LOCK = "/tmp/lnet-testbed.lock"
MTIME = 1_700_000_000  # every size's file gets this mtime: same validators on every replica, run after run
SETTLE_S = 2.0  # after each run: aborted requests reach nginx's log, queues drain

ARIA2_FAIR = ["--split=N", "--max-connection-per-server=1", "--min-split-size=1M", "--piece-length=1M",
              "--uri-selector=inorder", "--lowest-speed-limit=0"]
ARIA2_UNATTENDED = ["--no-conf=true", "--allow-overwrite=true", "--auto-file-renaming=false",
                    "--file-allocation=none", "--console-log-level=warn", "--summary-interval=0"]
STRATEGIES = ("mdtp", "static", "brute", "history", "aggressive")
ARIA2 = ("aria2-fair", "aria2-default")
COMPETITORS = (*ARIA2, *STRATEGIES)
SCENARIOS = ("normal", "latency", "throttled", "slowdown", "dies")
CHANGED_MIDWAY = ("slowdown", "dies")
LATENCY_ADDED_RTT_MS = 500.0
THROTTLE_FACTOR = 0.25
TARGET_FAIR_SPEEDUP = 1.15  # where aria2 fair is below TARGET_FAIR_WEAK of the limit
TARGET_FAIR_WEAK = 0.85
TARGET_DEFAULT_SPEEDUP = 1.25
TARGET_LIMIT_SHARE_LARGE = 0.97  # normal, at LARGE_FROM and above
TARGET_LIMIT_SHARE_SMALL = 0.85
LARGE_FROM = 256 * 1024 * 1024
ESTIMATE_OVERHEAD_S = 5.0  # per run, beyond the transfer: process start, output check, settling
ESTIMATE_SLACK = 1.3  # runs take this much longer than the physical limit, roughly
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + the timestamp option 12: what of each full packet is not the file

NGINX_CONF = """\
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format lnet '$msec $connection $connection_requests $status $bytes_sent $body_bytes_sent '
                    '$request_time "$http_range"';
    access_log {run}/access.log lnet;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 300s;
    keepalive_requests 100000;
    server {{
        listen {port};
        root {root};
    }}
}}
"""


# -- the machine ---------------------------------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path)


def ensure_tools(say: Callable[[str], None]) -> dict[str, str]:
    """nginx and aria2c, installed from Debian's packages when missing; returns their paths."""
    packages = {"nginx": "nginx", "aria2c": "aria2"}
    missing = [package for tool, package in packages.items() if find_tool(tool) is None]
    if missing:
        if shutil.which("apt-get") is None:
            raise SystemExit(f"this benchmark needs {' and '.join(missing)} and there is no apt-get to install "
                             "them: install them yourself")
        say(f"{' and '.join(missing)} not found: installing Debian's package(s) with apt-get "
            f"(apt-get update && apt-get install -y {' '.join(missing)}) ...")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    tools = {tool: find_tool(tool) for tool in packages}
    if None in tools.values():
        raise SystemExit(f"still missing after apt-get: {[t for t, p in tools.items() if p is None]}")
    return {tool: str(path) for tool, path in tools.items()}


def tool_versions(tools: dict[str, str], lnet_get: Path) -> dict[str, str]:
    nginx = subprocess.run([tools["nginx"], "-v"], capture_output=True, text=True)
    aria2 = subprocess.run([tools["aria2c"], "--version"], capture_output=True, text=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return {"nginx": (nginx.stderr or nginx.stdout).strip(), "aria2c": aria2.stdout.splitlines()[0].strip(),
            "lnet_get": str(lnet_get),
            "lnet_commit": head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")}


def lnet_get_has_urls(lnet_get: Path) -> bool:
    if not lnet_get.exists():
        return False
    done = subprocess.run([str(lnet_get), "--help"], capture_output=True, text=True)
    return "--strategy" in done.stdout


@contextlib.contextmanager
def bench_lock(say: Callable[[str], None]) -> Iterator[None]:
    """Hold LOCK (/tmp/lnet-testbed.lock), unless a parent (`flock /tmp/lnet-testbed.lock ...`) already does: then the
    lock file is among the descriptors this process inherited, and locking it again here would wait forever."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == LOCK:
                yield
                return
    with open(LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for {LOCK}: another benchmark is running ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# -- payloads and servers --------------------------------------------------------------------------------------
async def write_payloads(root: Path, sizes: dict[str, int], say: Callable[[str], None]) -> dict[str, str]:
    """Each size's test file under ``root`` (``LABEL/file.bin``, as nginx serves it); their sha256 by label."""
    digests = {}
    for label, size in sizes.items():
        say(f"writing the {label} test file ...")
        digests[label] = await trio.to_thread.run_sync(write_payload, root / label / "file.bin", size)
    return digests


def write_payload(path: Path, size: int) -> str:
    """Random bytes, written once per size; returns their sha256."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        left = size
        while left:
            chunk = os.urandom(min(left, 16 << 20))
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    path.chmod(0o644)
    path.parent.chmod(0o755)
    os.utime(path, (MTIME, MTIME))
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class Replicas:
    """One nginx per replica host, each with its own prefix, pid file and logs, all serving `root`."""

    def __init__(self, tb: Testbed, nginx: str, root: Path, workdir: Path, hosts: list[str]) -> None:
        self.tb, self.nginx, self.root, self.workdir, self.hosts = tb, nginx, root, workdir, hosts
        self.log_offsets: dict[str, int] = {}
        self.processes: dict[str, trio.Process] = {}

    def url(self, host: str, name: str) -> str:
        return f"http://{self.tb.address(host)}:{PORT}/{name}"

    def access_log(self, host: str) -> Path:
        return self.workdir / host / "access.log"

    def _prepare(self, host: str) -> None:
        run = self.workdir / host
        run.mkdir(parents=True)
        (run / "nginx.conf").write_text(NGINX_CONF.format(run=run, port=PORT, root=self.root))

    def _stderr(self, host: str) -> BinaryIO:
        return open(self.workdir / host / "stderr.log", "ab")  # the caller closes it once nginx holds it

    async def _spawn(self, host: str) -> None:
        run = self.workdir / host
        stderr = self._stderr(host)
        try:
            self.processes[host] = await self.tb.spawn(
                host, [self.nginx, "-p", str(run), "-e", "stderr", "-c", str(run / "nginx.conf"), "-g", "daemon off;"],
                stdout=stderr, stderr=stderr)
        finally:
            stderr.close()

    async def start(self) -> None:
        for host in self.hosts:
            self._prepare(host)
            await self._spawn(host)

    async def kill(self, host: str) -> str:
        """SIGKILL the host's nginx, master and worker: its connections break, new ones are refused. Says which
        processes it killed and the state each is in after."""
        proc = self.processes.pop(host)
        pids = [*descendants(proc.pid), proc.pid]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await proc.wait()
        await trio.sleep(0.05)
        return " ".join(f"{pid}:{process_state(pid)}" for pid in pids)

    async def restart(self, host: str, name: str) -> None:
        """Start the host's nginx again (after ``kill``) and wait until it answers."""
        if host not in self.processes:
            await self._spawn(host)
        await self._headers(host, name)

    async def _headers(self, host: str, name: str) -> dict[str, str]:
        headers: dict[str, str] = {}
        with trio.move_on_after(15):
            while True:
                done = await self.tb.run(CLIENT, ["curl", "-sS", "-I", "--max-time", "5", self.url(host, name)],
                                         check=False)
                if done.returncode == 0:
                    lines = done.stdout.decode(errors="replace").splitlines()
                    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
                    break
                await trio.sleep(0.2)
        if not headers:
            log = (self.workdir / host / "stderr.log").read_text(errors="replace")
            raise RuntimeError(f"nginx on {host} does not answer {self.url(host, name)}: {log[-2000:]}")
        return headers

    async def check(self, name: str, size: int) -> dict[str, str]:
        """Wait until every replica answers, and check they all give the same size and validators."""
        seen: dict[str, tuple[str, str, str]] = {}
        for host in self.hosts:
            headers = await self._headers(host, name)
            seen[host] = (headers.get("content-length", ""), headers.get("etag", ""),
                          headers.get("last-modified", ""))
        if len(set(seen.values())) != 1 or next(iter(seen.values()))[0] != str(size):
            raise RuntimeError(f"the replicas disagree on {name} (content-length, etag, last-modified): {seen}")
        length, etag, modified = next(iter(seen.values()))
        return {"content_length": length, "etag": etag, "last_modified": modified}

    def mark(self) -> None:
        for host in self.hosts:
            path = self.access_log(host)
            self.log_offsets[host] = path.stat().st_size if path.exists() else 0

    def since_mark(self) -> dict[str, dict[str, int]]:
        """Per replica: body bytes, requests and connections in the access log since mark()."""
        out = {}
        for host in self.hosts:
            body = requests = 0
            connections = set()
            with open(self.access_log(host), "rb") as f:
                f.seek(self.log_offsets.get(host, 0))
                for line in f.read().decode(errors="replace").splitlines():
                    fields = line.split()
                    if len(fields) < 7:
                        continue
                    requests += 1
                    connections.add(fields[1])
                    body += int(fields[5])
            out[host] = {"bytes": body, "requests": requests, "connections": len(connections)}
        return out


def process_state(pid: int) -> str:
    """Its state letter from /proc (Z: a zombie, gone), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (nginx's worker), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the command's ")"
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def make_workdir(parent: str | None) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix="lnet-multisource-", dir=parent))
    workdir.chmod(0o755)  # nginx's workers (not root) read the files below it
    (workdir / "downloads").mkdir()
    return workdir


# -- the runs ---------------------------------------------------------------------------------------------------
class ReplicaChange(NamedTuple):
    """One replica's change mid-run: its link rate goes to ``factor`` of itself, or its nginx is killed (factor 0),
    ``at_fraction`` of the run's physical-limit time (at the limit before the change) after the run starts."""
    host: str
    factor: float
    at_fraction: float = 0.5

    @property
    def dies(self) -> bool:
        return self.factor == 0.0


def limit_mbit(rates: Iterable[float], access_mbit: float | None) -> float:
    """The physical limit: the replicas' link rates added up, capped by the client's access link (None: none)."""
    total = sum(rates)
    return min(total, access_mbit) if access_mbit else total


def changed_limit_mbit(before: float, after: float, at_fraction: float) -> float:
    """The limit of a run whose limit goes from ``before`` to ``after`` once ``at_fraction`` of the time the file
    takes at ``before`` has gone: that fraction of the file at the one, the rest at the other (at half time, the
    harmonic mean of the two)."""
    return 1 / (at_fraction / before + (1 - at_fraction) / after)


def link_rates_mbit(tb: Testbed, replicas: list[str]) -> dict[str, float]:
    return {host: float(tb.topology.link(EDGE, host).rate_mbit or 0.0) for host in replicas}


def physical_limit_mbit(tb: Testbed, replicas: list[str], change: ReplicaChange | None = None) -> float:
    """The testbed's physical limit as it is now, or once ``change`` is done."""
    rates = link_rates_mbit(tb, replicas)
    if change is not None:
        rates[change.host] *= change.factor
    return limit_mbit(rates.values(), tb.topology.link(CLIENT, EDGE).rate_mbit)


def run_limit_mbit(tb: Testbed, replicas: list[str], change: ReplicaChange | None) -> float:
    """A run's physical limit on the testbed as it is now, with ``change`` at its time if there is one."""
    before = physical_limit_mbit(tb, replicas)
    if change is None:
        return before
    return changed_limit_mbit(before, physical_limit_mbit(tb, replicas, change), change.at_fraction)


def named_change(scenario: str) -> ReplicaChange | None:
    """What a named scenario changes mid-run: r1 slows to a quarter, or dies, at half time."""
    if scenario == "slowdown":
        return ReplicaChange(FASTEST, THROTTLE_FACTOR)
    if scenario == "dies":
        return ReplicaChange(FASTEST, 0.0)
    return None


class Feed(NamedTuple):
    """One replica as the round-trip floor sees it: its first byte reaches the client at ``first_byte_s``; from
    then on it delivers at ``rate_mbit`` (link rate, IP bytes), and from ``change_s`` on at ``after_mbit``."""
    first_byte_s: float
    rate_mbit: float
    change_s: float | None = None
    after_mbit: float = 0.0

    def rate_at(self, t: float) -> float:
        if t < self.first_byte_s:
            return 0.0
        return self.after_mbit if self.change_s is not None and t >= self.change_s else self.rate_mbit


def round_trip_floor_s(size: int, feeds: list[Feed], access_mbit: float | None, payload_share: float) -> float:
    """The earliest any client can hold all ``size`` bytes, if it took no time to start and TCP had no slow start:
    the file's bytes at the replicas' link rates times ``payload_share`` (headers are not the file), the client's
    access link capping the sum, each replica's from its first byte on (two round trips: the handshake, then the
    request). aria2 and lnet both pay at least this; a target asking for less cannot be met by any client."""
    need = size * 8 / 1e6  # Mbit still to come
    marks = sorted({0.0, *(f.first_byte_s for f in feeds), *(f.change_s for f in feeds if f.change_s is not None)})
    for start, end in zip(marks, [*marks[1:], math.inf], strict=True):
        total = sum(f.rate_at(start) for f in feeds)
        rate = min(total, access_mbit) if access_mbit else total
        rate *= payload_share
        if rate > 0 and need <= rate * (end - start):
            return start + need / rate
        need -= rate * (end - start) if rate > 0 else 0.0
    raise ValueError("the replicas never deliver the whole file (every one stops)")


def replica_feeds(tb: Testbed, replicas: list[str]) -> list[Feed]:
    """The replicas' feeds on the testbed as it is now: first byte after two round trips client-replica."""
    access = tb.topology.link(CLIENT, EDGE)
    feeds = []
    for host in replicas:
        link = tb.topology.link(EDGE, host)
        rtt_s = 2 * (access.delay_ms + link.delay_ms) / 1000  # delay_ms is one way, applied in each direction
        feeds.append(Feed(2 * rtt_s, float(link.rate_mbit or 0.0)))
    return feeds


def run_floor_s(tb: Testbed, feeds: list[Feed], replicas: list[str], size: int, change: ReplicaChange | None,
                changed_at_s: float | None) -> float:
    """A run's round-trip floor: ``feeds`` taken before it, with its change (when the change was done, which is no
    earlier than when it took effect: the floor stays a lower bound)."""
    if change is not None and changed_at_s is not None:
        feeds = [f._replace(change_s=changed_at_s, after_mbit=f.rate_mbit * change.factor) if host == change.host
                 else f for host, f in zip(replicas, feeds, strict=True)]
    mtu = tb.topology.mtu
    return round_trip_floor_s(size, feeds, tb.topology.link(CLIENT, EDGE).rate_mbit,
                              (mtu - TCP_IP_HEADER_BYTES) / mtu)


async def set_scenario(tb: Testbed, scenario: str, base_delay_ms: float, base_rate_mbit: float) -> None:
    delay, rate = base_delay_ms, base_rate_mbit
    if scenario == "latency":
        delay = base_delay_ms + LATENCY_ADDED_RTT_MS / 2  # delay_ms is one way, applied in each direction
    elif scenario == "throttled":
        rate = base_rate_mbit * THROTTLE_FACTOR
    await tb.set_link(EDGE, FASTEST, delay_ms=delay, rate_mbit=rate)


def midway_change(tb: Testbed, servers: Replicas,
                  change: ReplicaChange) -> tuple[Callable[[], Awaitable[str]], Callable[[str], Awaitable[None]]]:
    """What ``change`` does mid-run, and what puts it back after the run (given the file)."""
    host = change.host
    if change.dies:
        async def die() -> str:
            return await servers.kill(host)

        async def revive(name: str) -> None:
            await servers.restart(host, name)

        return die, revive
    rate = float(tb.topology.link(EDGE, host).rate_mbit or 0.0)

    async def slow() -> str:
        await tb.set_link(EDGE, host, rate_mbit=rate * change.factor)
        return f"{host} at {rate * change.factor:g} Mbit/s"

    async def unslow(name: str) -> None:
        await tb.set_link(EDGE, host, rate_mbit=rate)

    return slow, unslow


async def curl_capacity(tb: Testbed, url: str, nbytes: int) -> dict[str, float]:
    done = await tb.run(CLIENT, ["curl", "-sS", "-o", "/dev/null", "-r", f"0-{nbytes - 1}", "-w",
                                 "%{size_download} %{time_total}", url])
    got, seconds = done.stdout.decode().split()
    return {"bytes": int(got), "seconds": float(seconds), "mbps": int(got) * 8 / float(seconds) / 1e6}


def aria2_fair(replicas: int) -> list[str]:
    """The fair flags for ``replicas`` mirrors: one connection to each (``--split`` their number), like lnet-get."""
    return [f"--split={replicas}" if flag == "--split=N" else flag for flag in ARIA2_FAIR]


def competitor_argv(competitor: str, urls: list[str], out: Path, sha256: str, tools: dict[str, str],
                    lnet_get: Path, lnet_args: list[str]) -> list[str]:
    if competitor in ARIA2:
        fair = aria2_fair(len(urls)) if competitor == "aria2-fair" else []
        return [tools["aria2c"], *fair, *ARIA2_UNATTENDED, "-d", str(out.parent), "-o", out.name, *urls]
    strategy, *options = competitor.split(":")  # mdtp:tail=hedge:depth=3 -> --tail hedge --depth 3
    extra = [part for option in options for part in (f"--{option.partition('=')[0]}", option.partition("=")[2])]
    # the remembered throughputs live with this benchmark, not in the user's cache
    history = out.parent.parent / "replicas-history.json"
    return [str(lnet_get), *urls, "-o", str(out), "--strategy", strategy, "--sha256", sha256, "--json",
            "--no-progress", "--history", str(history), "--trace", str(trace_path(out)), *lnet_args, *extra]


def trace_path(out: Path) -> Path:
    """Where an lnet run writes its --trace (beside the download; read into the run's record, then removed)."""
    return out.with_name(out.name + ".trace.jsonl")


def read_trace(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finish_spread(record: dict[str, Any]) -> float | None:
    """Seconds between the first and the last replica's last byte (lnet's report): MDTP wants them together."""
    ends = [r["last_byte_s"] for r in (record.get("lnet") or {}).get("replicas", [])
            if r.get("last_byte_s") is not None]
    return max(ends) - min(ends) if len(ends) > 1 else None


async def one_run(tb: Testbed, servers: Replicas, competitor: str, urls: list[str], out: Path, size: int,
                  sha256: str, tools: dict[str, str], lnet_get: Path, lnet_args: list[str], timeout_s: float,
                  change: tuple[float, Callable[[], Awaitable[str]]] | None = None) -> dict[str, Any]:
    """One competitor's download; ``change``: (seconds after its start, what happens then)."""
    argv = competitor_argv(competitor, urls, out, sha256, tools, lnet_get, lnet_args)
    record: dict[str, Any] = {"ok": False, "argv": argv}
    servers.mark()
    started = trio.current_time()
    done: subprocess.CompletedProcess[bytes] | None = None

    async def change_midway(after: float, action: Callable[[], Awaitable[str]]) -> None:
        await trio.sleep_until(started + after)
        record["change"] = await action()
        record["changed_at_s"] = trio.current_time() - started

    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            if change is not None:
                nursery.start_soon(change_midway, *change)
            done = await tb.run(CLIENT, argv, check=False)
            nursery.cancel_scope.cancel()  # a run that ended before half time: no change
    wall = trio.current_time() - started
    await trio.sleep(SETTLE_S)
    record["nginx"] = servers.since_mark()
    record["sent_bytes"] = sum(r["bytes"] for r in record["nginx"].values())
    if done is None:
        record["error"] = f"timed out after {timeout_s:.0f} s"
    elif done.returncode != 0:
        tail = (done.stderr or b"").decode(errors="replace")[-1500:] or done.stdout.decode(errors="replace")[-1500:]
        record["error"] = f"exit {done.returncode}: {tail.strip()}"
    else:
        record["wall_s"] = wall
        if competitor not in ARIA2:
            try:
                report = json.loads(done.stdout)
            except ValueError:
                report = {"ok": False, "unparsed_stdout": done.stdout.decode(errors="replace")[-1500:]}
            record["lnet"] = report
            record["trace"] = await trio.to_thread.run_sync(read_trace, trace_path(out))
            if report.get("seconds") is not None:
                record["own_s"] = float(report["seconds"])
        wrong = await trio.to_thread.run_sync(check_output, out, size, sha256)
        if wrong:
            record["error"] = wrong
        else:
            record["ok"] = True
    await trio.to_thread.run_sync(empty_dir, out.parent)
    return record


async def measured_run(tb: Testbed, servers: Replicas, hosts: list[str], competitor: str, path: str, size: int,
                       sha256: str, downloads: Path, tools: dict[str, str], lnet_get: Path, args: argparse.Namespace,
                       limit_s: float, change: ReplicaChange | None) -> dict[str, Any]:
    """One competitor's download of ``path`` from every replica in ``hosts``, with ``change`` at its time (undone
    after the run), and the run's round-trip floor."""
    urls = [servers.url(h, path) for h in hosts]
    out = downloads / f"{competitor.replace(':', '_')}.bin"
    feeds = replica_feeds(tb, hosts)  # before the change
    midway: tuple[float, Callable[[], Awaitable[str]]] | None = None
    undo: Callable[[str], Awaitable[None]] | None = None
    if change is not None:
        action, undo = midway_change(tb, servers, change)
        midway = (size * 8 / (physical_limit_mbit(tb, hosts) * 1e6) * change.at_fraction, action)
    try:
        record = await one_run(tb, servers, competitor, urls, out, size, sha256, tools, lnet_get, args.lnet_arg,
                               args.timeout_factor * limit_s + 60, midway)
    finally:
        if undo is not None:
            await undo(path)
    record["floor_s"] = run_floor_s(tb, feeds, hosts, size, change, record.get("changed_at_s"))
    return record


def run_text(record: dict[str, Any], size: int, limit_s: float) -> str:
    """How a run went, for its progress line."""
    sh = "/".join(f"{100 * v:.0f}" for v in shares(record["nginx"]).values())
    if record["ok"]:
        own = f", lnet's own {record['own_s']:.2f} s" if "own_s" in record else ""
        if (spread := finish_spread(record)) is not None:
            own += f", last bytes within {spread:.2f} s"
        text = (f"{record['wall_s']:7.2f} s ({size * 8 / record['wall_s'] / 1e6:6.1f} Mbit/s,"
                f" {limit_s / record['wall_s']:.0%} of limit, floor"
                f" {record['floor_s']:.2f} s{own}), nginx shares {sh} %")
    else:
        text = f"FAILED: {record['error'][:300]}"
    if "change" in record:
        text += f"; at {record['changed_at_s']:.2f} s: {record['change']}"
    return text


def check_output(out: Path, size: int, sha256: str) -> str | None:
    """None when `out` holds the payload, else what is wrong with it."""
    got = out.stat().st_size if out.exists() else -1
    digest = file_sha256(out) if got == size else ""
    if got != size or digest != sha256:
        return f"wrong output: {got} bytes (want {size}), sha256 {digest[:16] or '-'}"
    return None


def empty_dir(path: Path) -> None:
    for leftover in path.iterdir():
        leftover.unlink()


def shares(nginx: dict[str, dict[str, int]]) -> dict[str, float]:
    total = sum(r["bytes"] for r in nginx.values()) or 1
    return {host: r["bytes"] / total for host, r in nginx.items()}


def lnet_replicas_used(record: dict[str, Any]) -> int | None:
    replicas = (record.get("lnet") or {}).get("replicas")
    if not isinstance(replicas, list):
        return None
    return sum(1 for r in replicas if int(r.get("bytes", 0)) > 0)


def nginx_replicas_used(record: dict[str, Any]) -> int:
    return sum(1 for r in record["nginx"].values() if r["bytes"] > 0)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(runs: list[dict[str, Any]], plan: list[tuple[str, str, str]], limits: dict[str, float],
              sizes: dict[str, int], hosts: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scenario, label, competitor in plan:
        mine = [r for r in runs if (r["scenario"], r["size"], r["competitor"]) == (scenario, label, competitor)]
        ok = [r for r in mine if r["ok"]]
        wall = median([r["wall_s"] for r in ok])
        own = median([r["own_s"] for r in ok if "own_s" in r])
        limit_s = sizes[label] * 8 / (limits[scenario] * 1e6)
        floor = median([r["floor_s"] for r in ok if "floor_s" in r])
        per_host = {h: median([shares(r["nginx"])[h] for r in ok]) for h in hosts}
        rows.append({
            "scenario": scenario, "size": label, "competitor": competitor, "runs": len(mine), "ok": len(ok),
            "median_wall_s": wall, "median_own_s": own,
            "median_mbps": sizes[label] * 8 / wall / 1e6 if wall else None,
            "physical_limit_s": limit_s, "share_of_limit": limit_s / wall if wall else None,
            "round_trip_floor_s": floor, "share_of_floor": floor / wall if floor and wall else None,
            "replicas_used_nginx": min((nginx_replicas_used(r) for r in ok), default=None),
            "replicas_used_lnet": min((u for r in ok if (u := lnet_replicas_used(r)) is not None), default=None),
            "median_shares": per_host,
            "median_overfetch": median([r["sent_bytes"] / sizes[label] for r in ok]),
            "errors": [r["error"] for r in mine if not r["ok"]],
        })
    for row in rows:
        for aria, key in (("aria2-fair", "speedup_vs_fair"), ("aria2-default", "speedup_vs_default")):
            other = next((x for x in rows if (x["scenario"], x["size"], x["competitor"]) ==
                          (row["scenario"], row["size"], aria)), None)
            row[key] = (other["median_wall_s"] / row["median_wall_s"]
                        if other and other["median_wall_s"] and row["median_wall_s"] else None)
    return rows


def speedup_target(name: str, row: dict[str, Any], other: dict[str, Any], key: str, want: float) -> dict[str, Any]:
    """lnet's speedup over ``other``, and whether ``want`` can be had at all: the time it asks for against the
    round-trip floor, which no client beats (``reachable`` False, and said in the value, when it is below)."""
    check = {"target": name, "value": f"{row[key]:.2f}x", "met": row[key] >= want}
    floor = row.get("round_trip_floor_s")
    if floor is not None and other["median_wall_s"] is not None:
        asks = other["median_wall_s"] / want
        check["reachable"] = asks >= floor
        if not check["reachable"]:
            check["value"] += f"; unreachable: {want}x is {asks:.2f} s, below the round-trip floor {floor:.2f} s"
    return check


def targets(rows: list[dict[str, Any]], runs: list[dict[str, Any]], n_replicas: int,
            sizes: dict[str, int]) -> list[dict[str, Any]]:
    """The named scenarios''s targets for lnet mdtp, per scenario and size, and identical bytes everywhere."""
    out = []
    for row in rows:
        if row["competitor"] != "mdtp":
            continue
        where = f"{row['scenario']}, {row['size']}"
        fair = next((x for x in rows if (x["scenario"], x["size"], x["competitor"]) ==
                     (row["scenario"], row["size"], "aria2-fair")), None)
        if row["speedup_vs_fair"] is not None:
            out.append({"target": f"mdtp never slower than aria2 fair ({where})",
                        "value": f"{row['speedup_vs_fair']:.2f}x", "met": row["speedup_vs_fair"] >= 1.0})
            if fair is not None and fair["share_of_limit"] is not None and fair["share_of_limit"] < TARGET_FAIR_WEAK:
                out.append(speedup_target(f"mdtp >= {TARGET_FAIR_SPEEDUP}x aria2 fair, which reaches "
                                          f"{fair['share_of_limit']:.0%} of the limit ({where})",
                                          row, fair, "speedup_vs_fair", TARGET_FAIR_SPEEDUP))
        if row["speedup_vs_default"] is not None:
            default = next(x for x in rows if (x["scenario"], x["size"], x["competitor"]) ==
                           (row["scenario"], row["size"], "aria2-default"))
            out.append(speedup_target(f"mdtp >= {TARGET_DEFAULT_SPEEDUP}x aria2 default ({where})",
                                      row, default, "speedup_vs_default", TARGET_DEFAULT_SPEEDUP))
        if row["scenario"] == "normal" and row["share_of_limit"] is not None:
            want = TARGET_LIMIT_SHARE_LARGE if sizes[row["size"]] >= LARGE_FROM else TARGET_LIMIT_SHARE_SMALL
            out.append({"target": f"mdtp >= {want:.0%} of the physical limit ({where})",
                        "value": f"{row['share_of_limit']:.1%}", "met": row["share_of_limit"] >= want})
        mine = [r for r in runs if r["ok"] and (r["scenario"], r["size"], r["competitor"]) ==
                (row["scenario"], row["size"], "mdtp")]
        if mine:
            used = [lnet_replicas_used(r) for r in mine]
            out.append({"target": f"mdtp uses every replica in every run ({where})",
                        "value": "/".join("?" if u is None else str(u) for u in used) + f" of {n_replicas}",
                        "met": all(u == n_replicas for u in used)})
    good = sum(1 for r in runs if r["ok"])
    out.append({"target": "identical bytes in every run of every competitor", "value": f"{good} of {len(runs)}",
                "met": good == len(runs)})
    return out


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]], hosts: list[str]) -> None:
    print()
    print(f"{'scenario':<10} {'size':>7} {'competitor':<22} {'ok':>5} {'wall s':>8} {'own s':>7} {'Mbit/s':>7} "
          f"{'of limit':>8} {'floor s':>7} {'vs fair':>7} {'vs dflt':>7} {'used':>5}  "
          f"{'nginx shares ' + '/'.join(hosts):<32} {'sent/size':>9}")
    for r in rows:
        name = r["competitor"] if r["competitor"] in ARIA2 else f"lnet {r['competitor']}"
        used = "-" if r["replicas_used_nginx"] is None else str(r["replicas_used_nginx"])
        share_text = "/".join(fmt(None if v is None else 100 * v, ".0f") for v in r["median_shares"].values())
        print(f"{r['scenario']:<10} {r['size']:>7} {name:<22} {r['ok']:>2}/{r['runs']:<2} "
              f"{fmt(r['median_wall_s'], '.2f'):>8} {fmt(r['median_own_s'], '.2f'):>7} "
              f"{fmt(r['median_mbps'], '.1f'):>7} {fmt(r['share_of_limit'], '.1%'):>8} "
              f"{fmt(r.get('round_trip_floor_s'), '.2f'):>7} "
              f"{fmt(r['speedup_vs_fair'], '.2f'):>7} {fmt(r['speedup_vs_default'], '.2f'):>7} {used:>5}  "
              f"{share_text + ' %':<32} {fmt(r['median_overfetch'], '.3f'):>9}")


# -- random replica sets ---------------------------------------------------------------------------
RANDOM_LNET = "mdtp"
RANDOM_COMPETITORS = ("aria2-fair", RANDOM_LNET)
RANDOM_SIZES = "64MiB"
TESTBED_UP_S = 15.0  # per replica set: the testbed up and down, nginx started and checked
RANDOM_TARGET_MEDIAN = 1.15  # lnet mdtp over aria2 fair, at the median
RANDOM_TARGET_MIN = 1.0  # ... and in every scenario
RANDOM_TARGET_LIMIT_SHARE = 0.90  # lnet mdtp's share of the physical limit at the median, at LARGE_FROM and above
RATIOS = (("lnet_over_fair", "lnet mdtp / aria2 fair (speedup)"),
          ("lnet_of_limit", "lnet mdtp / physical limit"),
          ("fair_of_limit", "aria2 fair / physical limit"),
          ("floor_over_fair", "round-trip floor / aria2 fair (most any client gains)"),
          ("lnet_of_floor", "lnet mdtp / round-trip floor"))


def set_change(rs: ReplicaSet) -> ReplicaChange | None:
    event = rs.event
    return None if event is None else ReplicaChange(event.replica, event.factor, event.at_fraction)


def set_limit_mbit(rs: ReplicaSet) -> float:
    """A replica set's physical limit, its event included (what ``run_limit_mbit`` gives on its testbed)."""
    before = limit_mbit(rs.rates_mbit.values(), rs.access_mbit)
    change = set_change(rs)
    if change is None:
        return before
    return changed_limit_mbit(before, limit_mbit(rs.rates_after_mbit().values(), rs.access_mbit),
                              change.at_fraction)


def random_estimate_s(sets: list[ReplicaSet], sizes: dict[str, int], runs: int) -> float:
    """Roughly how long ``--random`` takes: each set's testbed, then each run at its limit with slack and
    overhead."""
    total = 60.0 + sum(sizes.values()) / 200e6  # the payloads written
    for rs in sets:
        limit = set_limit_mbit(rs)
        total += TESTBED_UP_S + runs * len(RANDOM_COMPETITORS) * sum(
            size * 8 / (limit * 1e6) * ESTIMATE_SLACK + ESTIMATE_OVERHEAD_S + SETTLE_S for size in sizes.values())
    return total


def p10(values: list[float]) -> float:
    """The 10th percentile, nearest rank (as bench/scheduler.py --random reports it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def distribution(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "p10": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "p10": p10(values), "min": min(values),
            "max": max(values)}


def tail_of(record: dict[str, Any], hosts: list[str], rates_mbit: dict[str, float]) -> dict[str, Any] | None:
    """Which replica held an lnet run's tail (the last last byte, by lnet's report), how long after the next one,
    its share of the bytes against its share of the link rates, and the requests by how they ended (--trace)."""
    report = (record.get("lnet") or {}).get("replicas") or []
    ends = sorted((r["last_byte_s"], host, r) for host, r in zip(hosts, report, strict=False)
                  if r.get("last_byte_s") is not None and r.get("bytes", 0) > 0)
    if not ends:
        return None
    end, host, last = ends[-1]
    outcomes: dict[str, int] = {}
    for request in record.get("trace", []):
        if request.get("event") == "request":
            outcomes[str(request.get("outcome"))] = outcomes.get(str(request.get("outcome")), 0) + 1
    return {"replica": host, "last_byte_s": end, "after_next_s": end - ends[-2][0] if len(ends) > 1 else None,
            "share": last.get("share"), "rate_share": rates_mbit[host] / sum(rates_mbit.values()),
            "hedges": sum(1 for r in record.get("trace", []) if r.get("hedge")), "requests": outcomes,
            "startup_s": record["wall_s"] - record["own_s"] if "own_s" in record else None}


def median_run(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run whose wall time is the median (the lower one of an even count)."""
    ordered = sorted(records, key=lambda r: r["wall_s"])
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def random_rows(sets: list[dict[str, Any]], runs: list[dict[str, Any]], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """One row per replica set and size: the competitors' median times, the ratios, and lnet's tail."""
    rows = []
    for info in sets:
        for label, size in sizes.items():
            mine = [r for r in runs if r["set"] == info["index"] and r["size"] == label]
            fair = [r for r in mine if r["competitor"] == "aria2-fair" and r["ok"]]
            lnet = [r for r in mine if r["competitor"] == RANDOM_LNET and r["ok"]]
            fair_s, lnet_s = median([r["wall_s"] for r in fair]), median([r["wall_s"] for r in lnet])
            limit_s = size * 8 / (info["limit_mbit"] * 1e6)
            floor_s = median([r["floor_s"] for r in lnet if "floor_s" in r])
            # the earliest any client could finish: the round-trip floor, and never before the links' rates allow
            best_s = max(floor_s, limit_s) if floor_s is not None else None
            typical = median_run(lnet)
            rows.append({
                "index": info["index"], "kind": info["kind"], "replicas": len(info["hosts"]),
                "access_bottleneck": info["access_bottleneck"], "size": label, "limit_mbit": info["limit_mbit"],
                "limit_s": limit_s, "fair_s": fair_s, "lnet_s": lnet_s,
                "floor_s": floor_s,
                "lnet_over_fair": fair_s / lnet_s if fair_s and lnet_s else None,
                "lnet_of_limit": limit_s / lnet_s if lnet_s else None,
                "fair_of_limit": limit_s / fair_s if fair_s else None,
                "floor_over_fair": fair_s / best_s if fair_s and best_s else None,
                "lnet_of_floor": best_s / lnet_s if best_s and lnet_s else None,
                "lnet_overfetch": median([r["sent_bytes"] / size for r in lnet]),
                "fair_overfetch": median([r["sent_bytes"] / size for r in fair]),
                "runs": len(mine), "failed": sum(1 for r in mine if not r["ok"]),
                "tail": tail_of(typical, info["hosts"], info["rates_mbit"]) if typical else None,
            })
    return rows


def summarise_random(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per size, each ratio's distribution over the replica sets (a set where a competitor failed every run has
    no ratio and is left out here; the bytes target counts it)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        out.setdefault(row["size"], {})
    for label in out:
        mine = [r for r in rows if r["size"] == label]
        out[label] = {key: distribution([r[key] for r in mine if r[key] is not None]) for key, _ in RATIOS}
    return out


def random_targets(summary: dict[str, dict[str, Any]], sizes: dict[str, int],
                   runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The random sets' targets for lnet mdtp on the distribution over random replica sets, per size; the share of the
    limit at LARGE_FROM and above (said to be unmeasured when no size is that large). The median speedup target
    also says what the round-trip floor allows there: a client finishing every set at its floor gains the median of
    ``floor_over_fair`` over aria2 fair, and a target above that is ``reachable`` False."""
    out: list[dict[str, Any]] = []
    for label, ratios in summary.items():
        speedup = ratios["lnet_over_fair"]
        if speedup["n"]:
            check: dict[str, Any] = {"target": f"median lnet mdtp >= {RANDOM_TARGET_MEDIAN}x aria2 fair ({label})",
                                     "value": f"{speedup['median']:.2f}x",
                                     "met": speedup["median"] >= RANDOM_TARGET_MEDIAN}
            allows = ratios["floor_over_fair"]["median"]
            if allows is not None:
                check["reachable"] = allows >= RANDOM_TARGET_MEDIAN
                check["value"] += f"; a client at every set's round-trip floor: {allows:.2f}x"
                if not check["reachable"]:
                    check["value"] += " (unreachable)"
            out.append(check)
            out.append({"target": f"lnet mdtp never below {RANDOM_TARGET_MIN}x aria2 fair ({label})",
                        "value": f"min {speedup['min']:.2f}x", "met": speedup["min"] >= RANDOM_TARGET_MIN})
        share = ratios["lnet_of_limit"]
        if sizes[label] >= LARGE_FROM and share["n"]:
            out.append({"target": f"median lnet mdtp >= {RANDOM_TARGET_LIMIT_SHARE:.0%} of the physical limit "
                                  f"({label})", "value": f"{share['median']:.1%}",
                        "met": share["median"] >= RANDOM_TARGET_LIMIT_SHARE})
    if not any(size >= LARGE_FROM for size in sizes.values()):
        out.append({"target": f"median lnet mdtp >= {RANDOM_TARGET_LIMIT_SHARE:.0%} of the physical limit at "
                              f"{LARGE_FROM >> 20}MiB", "value": "no size that large in --sizes",
                    "met": None})
    good = sum(1 for r in runs if r["ok"])
    out.append({"target": "identical bytes in every run of every competitor", "value": f"{good} of {len(runs)}",
                "met": good == len(runs)})
    return out


def print_random(rows: list[dict[str, Any]], summary: dict[str, dict[str, Any]],
                 checks: list[dict[str, Any]]) -> None:
    print()
    print(f"{'set':>4} {'kind':<7} {'n':>2} {'acc':>4} {'size':>7} {'limit':>7} {'fair s':>7} {'lnet s':>7} "
          f"{'floor s':>7} {'lnet/fair':>9} {'lnet/lim':>8} {'fair/lim':>8} {'over':>6}  lnet's tail")
    for r in rows:
        tail = r["tail"]
        failed = f"; FAILED runs: {r['failed']}" if r["failed"] else ""
        tail_text = "-" if tail is None else (
            f"{tail['replica']} last at {tail['last_byte_s']:.2f} s (+{fmt(tail['after_next_s'], '.2f')} s), "
            f"share {fmt(tail['share'], '.0%')} vs rate {tail['rate_share']:.0%}")
        print(f"{r['index']:>4} {r['kind']:<7} {r['replicas']:>2} {'yes' if r['access_bottleneck'] else 'no':>4} "
              f"{r['size']:>7} {r['limit_mbit']:>7.1f} {fmt(r['fair_s'], '.2f'):>7} {fmt(r['lnet_s'], '.2f'):>7} "
              f"{fmt(r['floor_s'], '.2f'):>7} {fmt(r['lnet_over_fair'], '.2f'):>9} "
              f"{fmt(r['lnet_of_limit'], '.1%'):>8} {fmt(r['fair_of_limit'], '.1%'):>8} "
              f"{fmt(r['lnet_overfetch'], '.3f'):>6}  {tail_text}{failed}")
    print("\ndistribution over the replica sets (median / 10th percentile / min; n):")
    width = max(len(title) for _, title in RATIOS)
    for label, ratios in summary.items():
        for key, title in RATIOS:
            d = ratios[key]
            print(f"  {label:>7} {title:<{width}} {fmt(d['median'], '.3f')} / {fmt(d['p10'], '.3f')} / "
                  f"{fmt(d['min'], '.3f')}; n={d['n']}")
    print("\ntargets (random replica sets):")
    for check in checks:
        met = "not measured" if check["met"] is None else "met" if check["met"] else "MISSED"
        print(f"  {check['target']}: {check['value']} {met}")


def plot_random(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    """One panel per ratio: its CDF over the replica sets, one line per size, the targets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marks = {"lnet_over_fair": (RANDOM_TARGET_MIN, RANDOM_TARGET_MEDIAN), "lnet_of_limit": (RANDOM_TARGET_LIMIT_SHARE,),
             "fair_of_limit": (), "floor_over_fair": (RANDOM_TARGET_MEDIAN,), "lnet_of_floor": ()}
    figure, axes = plt.subplots(1, len(RATIOS), figsize=(5 * len(RATIOS), 4.5))
    for ax, (key, name) in zip(axes.flat, RATIOS, strict=True):
        plotted = False
        for label in dict.fromkeys(r["size"] for r in rows):
            values = sorted(r[key] for r in rows if r["size"] == label and r[key] is not None)
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                # from 0 at the least value, so that each set is a visible step (one set included)
                ax.step([values[0], *values], [0.0, *ys], where="post", label=f"{label} ({len(values)})",
                        linewidth=2)
                plotted = True
        for x in marks[key]:
            ax.axvline(x, color="grey", linewidth=0.8, linestyle="--")
        ax.set_title(name)
        ax.set_xlabel("ratio")
        ax.set_ylabel("fraction of replica sets")
        ax.set_ylim(0.0, 1.02)
        ax.grid(alpha=0.3)
        if plotted:
            ax.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# -- the benchmark ---------------------------------------------------------------------------------------------
def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """Names from ``allowed`` (``aria2`` is ``aria2-fair``; ``mdtp:tail=hedge:depth=3`` is a variant of mdtp)."""
    items = [x.strip().removeprefix("lnet-").removeprefix("lnet ") for x in text.split(",") if x.strip()]
    items = ["aria2-fair" if x == "aria2" else x for x in items]
    bad = [x for x in items if x.split(":")[0] not in allowed]
    if bad:
        raise SystemExit(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def sweep_variants(tails: str, depths: str) -> list[str]:
    """``mdtp:tail=T:depth=D`` for every combination asked for, but the default one (plain mdtp)."""
    tail_list = [t.strip() for t in tails.split(",") if t.strip()] or ["split"]
    depth_list = [d.strip() for d in depths.split(",") if d.strip()] or ["2"]
    bad = [t for t in tail_list if t not in ("split", "hedge", "none")] + [d for d in depth_list if not d.isdigit()]
    if bad:
        raise SystemExit(f"bad --sweep-tail/--sweep-depth value(s): {', '.join(bad)}")
    return [f"mdtp:tail={t}:depth={d}" for t in tail_list for d in depth_list if (t, d) != ("split", "2")]


def estimate_s(plan: list[tuple[str, str, str]], sizes: dict[str, int], runs: int, capacity_s: float) -> float:
    """Roughly how long the plan takes: each run at the physical limit (140 Mbit/s; 110 throttled) with slack
    and per-run overhead, the capacity curls, the testbed and the payloads."""
    total = 60.0 + sum(sizes.values()) / 200e6  # the testbed and nginx up; the payloads written
    for scenario, label, _ in plan:
        mbit = 110.0 if scenario in ("throttled", "slowdown", "dies") else 140.0
        total += runs * (sizes[label] * 8 / (mbit * 1e6) * ESTIMATE_SLACK + ESTIMATE_OVERHEAD_S + SETTLE_S)
    if capacity_s > 0:
        total += 6 * capacity_s + len({s for s, _, _ in plan}) * capacity_s
    return total


class Plan:
    """What to run: sizes, scenarios, the competitors at each size, and every (scenario, size, competitor)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.sizes = {label: parse_size(label) for label in args.sizes.split(",") if label.strip()}
        self.scenarios = parse_list(args.scenarios, SCENARIOS, "scenario")
        variants = sweep_variants(args.sweep_tail, args.sweep_depth)
        small = parse_list(args.competitors, COMPETITORS, "competitor") + variants
        large = parse_list(args.large_competitors, COMPETITORS, "competitor") + variants
        large_from = parse_size(args.large_from)
        self.per_size = {label: (large if size >= large_from else small) for label, size in self.sizes.items()}
        self.runs = [(s, label, c) for s in self.scenarios for label in self.sizes for c in self.per_size[label]]
        self.estimate_s = estimate_s(self.runs, self.sizes, args.runs, args.capacity_seconds)


async def bench(args: argparse.Namespace, the_plan: Plan, say: Callable[[str], None]) -> dict[str, Any]:
    sizes, scenarios, per_size, plan = the_plan.sizes, the_plan.scenarios, the_plan.per_size, the_plan.runs
    lnet_get = Path(args.lnet_get)
    if any(c not in ARIA2 for cs in per_size.values() for c in cs) and not lnet_get_has_urls(lnet_get):
        raise SystemExit(f"{lnet_get} has no multi-source mode (no --strategy in its --help): run with "
                         "--competitors aria2-fair,aria2-default --large-competitors aria2-fair,aria2-default, "
                         "or --lnet-get PATH")
    tools = ensure_tools(say)
    result: dict[str, Any] = {"bench": "multisource", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "topology": str(TOPOLOGY.relative_to(REPO)), "args": vars(args) | {"lnet_get": str(
                                  lnet_get)}, "tools": tool_versions(tools, lnet_get), "aria2_flags": ARIA2_FAIR,
                              "aria2_unattended_flags": ARIA2_UNATTENDED, "estimated_s": the_plan.estimate_s}
    workdir = await trio.to_thread.run_sync(make_workdir, args.workdir)
    try:
        root = workdir / "www"
        digests = await write_payloads(root, sizes, say)
        downloads = workdir / "downloads"
        async with Testbed(TOPOLOGY, name=TESTBED_NAME) as tb:
            hosts = [h for h in tb.hosts if h not in (CLIENT, EDGE)]
            base = tb.topology.link(EDGE, FASTEST)
            assert base.rate_mbit is not None
            servers = Replicas(tb, tools["nginx"], root, workdir / "nginx", hosts)
            await servers.start()
            result["validators"] = {label: await servers.check(f"{label}/file.bin", size)
                                    for label, size in sizes.items()}
            say(f"nginx up on {', '.join(hosts)}; every replica serves the same bytes and validators")
            capacity: dict[str, Any] = {}
            baseline: dict[str, Any] = {}
            first = next(iter(sizes))
            limits: dict[str, float] = {}
            total = len(plan) * args.runs
            runs: list[dict[str, Any]] = []
            for scenario in scenarios:
                await set_scenario(tb, scenario, base.delay_ms, base.rate_mbit)
                limits[scenario] = run_limit_mbit(tb, hosts, named_change(scenario))
                say(f"== {scenario}: r1 {tb.topology.link(EDGE, FASTEST).rate_mbit:g} Mbit/s, one-way "
                    f"{tb.topology.link(EDGE, FASTEST).delay_ms:g} ms; physical limit {limits[scenario]:.4g} Mbit/s")
                if args.capacity_seconds > 0 and scenario not in CHANGED_MIDWAY:
                    # all six in the first scenario; afterwards only r1, the one the scenarios change
                    measured = [FASTEST] if capacity else hosts
                    alone = {}
                    for host in measured:
                        rate = float(tb.topology.link(EDGE, host).rate_mbit or 0.0)
                        nbytes = int(min(sizes[first], rate * 1e6 / 8 * args.capacity_seconds))
                        alone[host] = await curl_capacity(tb, servers.url(host, f"{first}/file.bin"), nbytes)
                        say(f"   curl alone from {host}: {alone[host]['bytes'] / 2**20:.1f} MiB in "
                            f"{alone[host]['seconds']:.2f} s = {alone[host]['mbps']:.2f} Mbit/s (link {rate:g})")
                    baseline = baseline or alone
                    reachable = sum((alone.get(h) or baseline[h])["mbps"] for h in hosts)
                    capacity[scenario] = {"curl_alone": alone, "sum_mbps": reachable}
                    say(f"   reachable (sum of the curls alone): {reachable:.1f} Mbit/s")
                for rep in range(1, args.runs + 1):
                    for label, size in sizes.items():
                        limit_s = size * 8 / (limits[scenario] * 1e6)
                        for competitor in per_size[label]:
                            record = await measured_run(tb, servers, hosts, competitor, f"{label}/file.bin", size,
                                                        digests[label], downloads, tools, lnet_get, args, limit_s,
                                                        named_change(scenario))
                            record.update(scenario=scenario, size=label, competitor=competitor, rep=rep)
                            runs.append(record)
                            say(f"[{len(runs):>3}/{total}] {scenario:<9} {label:>7} {competitor:<10} rep {rep}: "
                                f"{run_text(record, size, limit_s)}")
            await set_scenario(tb, "normal", base.delay_ms, base.rate_mbit)
            result["emulator"] = {k: v for k, v in (await tb.status()).items() if k not in ("hosts", "links")}
        result.update(capacity=capacity, physical_limit_mbit=limits, runs=runs)
        rows = summarise(runs, plan, limits, sizes, hosts)
        result["summary"] = rows
        result["targets"] = targets(rows, runs, len(hosts), sizes)
        result["hosts"] = hosts
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def random_bench(args: argparse.Namespace, sets: list[ReplicaSet], sizes: dict[str, int],
                       say: Callable[[str], None]) -> dict[str, Any]:
    """aria2 fair and lnet mdtp on each replica set's own testbed, interleaved within each repetition; every set's
    topology, event and limit recorded beside its runs."""
    lnet_get = Path(args.lnet_get)
    if not lnet_get_has_urls(lnet_get):
        raise SystemExit(f"{lnet_get} has no multi-source mode (no --strategy in its --help): --lnet-get PATH")
    tools = ensure_tools(say)
    result: dict[str, Any] = {"tools": tool_versions(tools, lnet_get), "aria2_flags": ARIA2_FAIR,
                              "aria2_unattended_flags": ARIA2_UNATTENDED}
    workdir = await trio.to_thread.run_sync(make_workdir, args.workdir)
    infos: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    total = len(sets) * len(sizes) * len(RANDOM_COMPETITORS) * args.runs
    try:
        root = workdir / "www"
        digests = await write_payloads(root, sizes, say)
        downloads = workdir / "downloads"
        for rs in sets:
            change = set_change(rs)
            # lnet's remembered rates are by address, and the next set reuses the addresses with other rates
            (downloads.parent / "replicas-history.json").unlink(missing_ok=True)
            async with Testbed(rs.topology(), name=TESTBED_NAME) as tb:
                hosts = rs.hosts
                servers = Replicas(tb, tools["nginx"], root, workdir / f"nginx-{rs.index}", hosts)
                await servers.start()
                for label, size in sizes.items():
                    await servers.check(f"{label}/file.bin", size)
                limit = run_limit_mbit(tb, hosts, change)
                info: dict[str, Any] = {
                        "index": rs.index, "kind": rs.kind, "described": rs.describe(), "topology": rs.to_toml(),
                        "hosts": hosts, "rates_mbit": rs.rates_mbit, "access_mbit": rs.access_mbit,
                        "access_bottleneck": rs.access_is_bottleneck,
                        "round_trips_ms": {h: rs.round_trip_ms(h) for h in hosts},
                        "event": None if rs.event is None else dataclasses.asdict(rs.event),
                        "limit_mbit": limit}
                infos.append(info)
                say(f"== set {rs.index} ({rs.kind}): {rs.describe()}; physical limit {limit:.4g} Mbit/s")
                for rep in range(1, args.runs + 1):
                    for label, size in sizes.items():
                        limit_s = size * 8 / (limit * 1e6)
                        for competitor in RANDOM_COMPETITORS:
                            record = await measured_run(tb, servers, hosts, competitor, f"{label}/file.bin", size,
                                                        digests[label], downloads, tools, lnet_get, args, limit_s,
                                                        change)
                            record.update(set=rs.index, size=label, competitor=competitor, rep=rep)
                            runs.append(record)
                            say(f"[{len(runs):>3}/{total}] set {rs.index:<3} {label:>7} {competitor:<10} rep {rep}: "
                                f"{run_text(record, size, limit_s)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = random_rows(infos, runs, sizes)
    summary = summarise_random(rows)
    result.update(sets=infos, runs=runs, rows=rows, summary=summary, targets=random_targets(summary, sizes, runs))
    return result


async def random_main(args: argparse.Namespace, argv: list[str], say: Callable[[str], None]) -> int:
    """``--random N``: N replica sets of one seed (a fresh one unless --seed), the distribution, the plot."""
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    indices = [int(i) for i in args.only.split(",")] if args.only else list(range(args.random))
    sizes = {label: parse_size(label) for label in args.sizes.split(",") if label.strip()}
    sets = [replica_set(seed, i) for i in indices]
    rerun = (f"bench/multisource.py --random {args.random} --seed {seed} --sizes {args.sizes} --runs {args.runs}"
             + (f" --only {args.only}" if args.only else "") + "".join(f" --lnet-arg={a}" for a in args.lnet_arg))
    estimate = random_estimate_s(sets, sizes, args.runs)
    say(f"seed {seed} (rerun: {rerun})")
    say(f"plan: {len(sets)} replica sets x {len(sizes)} size(s) x {len(RANDOM_COMPETITORS)} competitors x "
        f"{args.runs} runs = {len(sets) * len(sizes) * len(RANDOM_COMPETITORS) * args.runs} runs; estimated "
        f"{estimate / 60:.0f} minutes")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    began = time.monotonic()
    with bench_lock(say):
        result = await random_bench(args, sets, sizes, say)
    document = {"bench": "multisource-random", "started": started, "wall_s": round(time.monotonic() - began, 1),
                "estimated_s": round(estimate, 1), "seed": seed, "indices": indices,
                "command": " ".join(["bench/multisource.py", *argv]), "rerun": rerun, "sizes": args.sizes,
                "runs_each": args.runs, "competitors": list(RANDOM_COMPETITORS), "lnet_args": args.lnet_arg,
                "generator": "lnet.testbed.replica_sets.replica_set(seed, index)", **result}
    print_random(result["rows"], result["summary"], result["targets"])
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"multisource-random-{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = args.results / f"{stem}.json"
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    picture = args.results / f"{stem}.png"
    plot_random(result["rows"], f"{rerun}  ({len(sets)} sets)", picture)
    print(f"\nseed {seed}; saved {path} and {picture}")
    return 1 if any(not r["ok"] for r in result["runs"]) else 0


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: --sizes 64MiB --runs 1 --capacity-seconds 0 (whatever they say)")
    parser.add_argument("--sizes", default=None,
                        help=f"comma-separated (default 64MiB,256MiB,1GiB; with --random {RANDOM_SIZES})")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {','.join(SCENARIOS)}")
    parser.add_argument("--competitors", default=",".join(COMPETITORS),
                        help="below --large-from (default: both aria2 and every lnet strategy)")
    parser.add_argument("--large-competitors", default="aria2-fair,aria2-default,mdtp",
                        help="at --large-from and above")
    parser.add_argument("--large-from", default="1GiB")
    parser.add_argument("--sweep-tail", default="", help="also lnet mdtp with each of these --tail rules (split,hedge)")
    parser.add_argument("--sweep-depth", default="", help="also lnet mdtp with each of these --depth values (1,2,3)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each (default 3; medians reported)")
    parser.add_argument("--capacity-seconds", type=float, default=15.0,
                        help="curl each replica alone for about this long first (0: skip)")
    parser.add_argument("--lnet-arg", action="append", default=[], help="extra argument for lnet-get (repeatable)")
    parser.add_argument("--lnet-get", default=str(REPO / ".venv" / "bin" / "lnet-get"))
    parser.add_argument("--timeout-factor", type=float, default=10.0,
                        help="a run is stopped after this many times the physical limit, plus 60 s")
    parser.add_argument("--workdir", default=None, help="where the temporary files go (default: the system's)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="instead of the named scenarios: N random replica sets (aria2 fair and lnet mdtp)")
    parser.add_argument("--seed", type=int, default=None, help="the random sets' seed (default: a fresh one)")
    parser.add_argument("--only", default="", help="with --random: only these indices of the seed (e.g. 3,7)")
    if argv is None:
        argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = RANDOM_SIZES if args.random else "64MiB,256MiB,1GiB"
    if args.quick:
        args.sizes, args.runs, args.capacity_seconds = "64MiB", 1, 0.0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if os.geteuid() != 0:
        print("this benchmark needs root (network namespaces for the testbed)", file=sys.stderr)
        return 1

    def say(text: str) -> None:
        print(text, flush=True)

    if args.random:
        return await random_main(args, argv, say)
    plan = Plan(args)  # its errors and its estimate before any wait
    say(f"plan: {len(plan.runs) * args.runs} runs ({len(plan.scenarios)} scenarios, sizes {args.sizes}, "
        f"{args.runs} each); estimated {plan.estimate_s / 60:.0f} minutes")
    with bench_lock(say):
        result = await bench(args, plan, say)
    rows, checks = result["summary"], result["targets"]
    print_table(rows, result["hosts"])
    print("\nphysical limits (Mbit/s): " + ", ".join(f"{s} {v:.4g}" for s, v in result["physical_limit_mbit"].items()))
    for scenario, cap in result["capacity"].items():
        print(f"reachable in {scenario} (sum of each replica's curl alone): {cap['sum_mbps']:.1f} Mbit/s")
    print("\ntargets (named scenarios):")
    for check in checks:
        print(f"  {check['target']}: {check['value']} {'met' if check['met'] else 'MISSED'}")
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"multisource-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"\nsaved {path}")
    print(json.dumps({"bench": "multisource", "summary": rows, "targets": checks}, default=str))
    failed = sum(1 for r in result["runs"] if not r["ok"])
    return 1 if failed else 0


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C, bare or inside the exception group of a nursery it cancelled."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


if __name__ == "__main__":
    try:
        code = trio.run(main)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        print("interrupted: nginx, the testbed and the temporary files are removed; no results saved",
              file=sys.stderr)
        code = 130
    sys.exit(code)
