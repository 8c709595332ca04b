"""lnet-get's multi-source download against aria2c on the replicas testbed (issue 6), with real nginx replicas.

    flock /tmp/lnet-bench.lock ./run bench multisource [--sizes 256MiB,1GiB] [--scenarios normal,latency,throttled]
        [--competitors aria2,mdtp,static,brute,history,aggressive] [--large-competitors aria2,mdtp] [--runs 3]
        [--capacity-seconds 15] [--lnet-arg=--tail=hedge ...]

Needs root (the testbed). On deploy/topologies/replicas.toml (testbed name `multisrc`): one nginx (Debian's
package) in each replica's namespace r1..r6, all serving the same file (one path, so the same bytes, the same
size and mtime, hence the same ETag and Last-Modified everywhere; checked with a HEAD to each before the runs),
`sendfile on`, keep-alive 300 s and 100000 requests per connection. nginx and aria2c are installed with apt-get
when missing (Debian's `nginx` and `aria2` packages).

Competitors, run in the `client` namespace, one after the other and interleaved within each repetition (aria2,
lnet mdtp, lnet static, ..., then again), so that drift on this 2-core machine hits all alike:
  aria2       aria2c with the fair flags of the issue (--split=6 --max-connection-per-server=1 --min-split-size=1M
              --piece-length=1M --uri-selector=inorder --lowest-speed-limit=0: one connection per mirror, like
              lnet), plus only what running it unattended needs (--no-conf, --allow-overwrite,
              --file-allocation=none, quiet console). Its retry defaults are left alone. It is not given the
              checksum: it would hash after the download, lnet hashes alongside.
  mdtp, static, brute, history, aggressive
              lnet-get URL x6 -o OUT --strategy S --sha256 HEX --json --no-progress --history FILE (plus any
              --lnet-arg). FILE (remembered replica throughputs) starts empty and lives as long as the
              benchmark, across scenarios: `history` plans from what earlier runs measured, stale after a change.
Every run is timed the same way, the whole process's wall clock (`ip netns exec` included); lnet's own
`seconds` is recorded beside it. After each run the output's size and sha256 are checked (outside the timing).

Scenarios (set with the testbed's set_link on the isp-r1 link, both directions, before the scenario's runs):
  normal      the topology as it is.
  latency     +500 ms round trip to the fastest replica r1: its link's one-way delay_ms (applied in each
              direction) goes from 5 to 255 ms, so the client-r1 RTT goes from 12 to 512 ms. The link's queue
              follows (the topology leaves queue_ms to its default, one link RTT).
  throttled   r1's link rate at a quarter: 40 -> 10 Mbit/s (the replicas' sum 140 -> 110 Mbit/s).
Physical limit: size / min(sum of the replicas' link rates, the client's access link 200 Mbit/s). Link rates
count IP packets; at MTU 9000 TCP payload is about 99.4% of that. Before the runs each replica's real capacity
is measured alone with one plain curl (a range of about --capacity-seconds at its link rate; 0 skips; r1 again
in each changed scenario), and the sum is shown as the reachable limit.

Every replica's share of each run comes from its nginx access log ($body_bytes_sent of the requests that run
made), the same measure for both competitors; the bytes all replicas sent over the file's size is the
over-fetch (aborted or duplicated requests; bytes still in socket buffers when a client hangs up count as
sent). lnet's own per-replica report is recorded too.

Targets (issue 6): lnet mdtp >= 1.15x aria2 (normal), >= 1.5x aria2 (throttled), every replica used (every
replica's bytes > 0 in lnet's report, every mdtp run), >= 90% of the physical limit (shown for each scenario).

Default plan: every competitor at sizes below 1 GiB, --large-competitors (aria2, mdtp) at 1 GiB and above,
3 repetitions, medians reported; about 45 minutes. A quick check: --sizes 64MiB --runs 1 --capacity-seconds 0.
Progress one line per run; at the end a table, the targets met/missed and one JSON line; everything is saved
to bench/results/multisource-<timestamp>.json. The benchmark holds /tmp/lnet-bench.lock while it runs (it
takes it itself unless started under `flock /tmp/lnet-bench.lock`), so two benchmarks never overlap. nginx,
the testbed and the temporary files are removed however it ends (Ctrl-C included).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.depot.units import parse_size  # noqa: E402
from lnet.testbed import Testbed  # noqa: E402

TOPOLOGY = REPO / "deploy" / "topologies" / "replicas.toml"
TESTBED_NAME = "multisrc"
CLIENT = "client"
EDGE = "isp"
FASTEST = "r1"
PORT = 8080
LOCK = "/tmp/lnet-bench.lock"
MTIME = 1_700_000_000  # every size's file gets this mtime: same validators on every replica, run after run
SETTLE_S = 2.0  # after each run: aborted requests reach nginx's log, queues drain

ARIA2_FAIR = ["--split=6", "--max-connection-per-server=1", "--min-split-size=1M", "--piece-length=1M",
              "--uri-selector=inorder", "--lowest-speed-limit=0"]
ARIA2_UNATTENDED = ["--no-conf=true", "--allow-overwrite=true", "--auto-file-renaming=false",
                    "--file-allocation=none", "--console-log-level=warn", "--summary-interval=0"]
STRATEGIES = ("mdtp", "static", "brute", "history", "aggressive")
COMPETITORS = ("aria2", *STRATEGIES)
SCENARIOS = ("normal", "latency", "throttled")
LATENCY_ADDED_RTT_MS = 500.0
THROTTLE_FACTOR = 0.25
TARGET_NORMAL_SPEEDUP = 1.15
TARGET_THROTTLED_SPEEDUP = 1.5
TARGET_LIMIT_SHARE = 0.9

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
    """Hold /tmp/lnet-bench.lock, unless a parent (`flock /tmp/lnet-bench.lock ...`) already does: then the
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

    def url(self, host: str, name: str) -> str:
        return f"http://{self.tb.address(host)}:{PORT}/{name}"

    def access_log(self, host: str) -> Path:
        return self.workdir / host / "access.log"

    def _prepare(self, host: str) -> tuple[Path, BinaryIO]:
        run = self.workdir / host
        run.mkdir(parents=True)
        conf = run / "nginx.conf"
        conf.write_text(NGINX_CONF.format(run=run, port=PORT, root=self.root))
        return conf, open(run / "stderr.log", "wb")  # the caller closes it once nginx holds it

    async def start(self) -> None:
        for host in self.hosts:
            run = self.workdir / host
            conf, stderr = self._prepare(host)
            try:
                await self.tb.spawn(host, [self.nginx, "-p", str(run), "-e", "stderr", "-c", str(conf),
                                           "-g", "daemon off;"], stdout=stderr, stderr=stderr)
            finally:
                stderr.close()

    async def check(self, name: str, size: int) -> dict[str, str]:
        """Wait until every replica answers, and check they all give the same size and validators."""
        seen: dict[str, tuple[str, str, str]] = {}
        for host in self.hosts:
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


def make_workdir(parent: str | None) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix="lnet-multisource-", dir=parent))
    workdir.chmod(0o755)  # nginx's workers (not root) read the files below it
    (workdir / "downloads").mkdir()
    return workdir


# -- the runs ---------------------------------------------------------------------------------------------------
def physical_limit_mbit(tb: Testbed, replicas: list[str]) -> float:
    total = sum(float(tb.topology.link(EDGE, host).rate_mbit or 0.0) for host in replicas)
    ingress = tb.topology.link(CLIENT, EDGE).rate_mbit
    return min(total, ingress) if ingress else total


async def set_scenario(tb: Testbed, scenario: str, base_delay_ms: float, base_rate_mbit: float) -> None:
    delay, rate = base_delay_ms, base_rate_mbit
    if scenario == "latency":
        delay = base_delay_ms + LATENCY_ADDED_RTT_MS / 2  # delay_ms is one way, applied in each direction
    elif scenario == "throttled":
        rate = base_rate_mbit * THROTTLE_FACTOR
    await tb.set_link(EDGE, FASTEST, delay_ms=delay, rate_mbit=rate)


async def curl_capacity(tb: Testbed, url: str, nbytes: int) -> dict[str, float]:
    done = await tb.run(CLIENT, ["curl", "-sS", "-o", "/dev/null", "-r", f"0-{nbytes - 1}", "-w",
                                 "%{size_download} %{time_total}", url])
    got, seconds = done.stdout.decode().split()
    return {"bytes": int(got), "seconds": float(seconds), "mbps": int(got) * 8 / float(seconds) / 1e6}


def competitor_argv(competitor: str, urls: list[str], out: Path, sha256: str, tools: dict[str, str],
                    lnet_get: Path, lnet_args: list[str]) -> list[str]:
    if competitor == "aria2":
        return [tools["aria2c"], *ARIA2_FAIR, *ARIA2_UNATTENDED, "-d", str(out.parent), "-o", out.name, *urls]
    # the remembered throughputs live with this benchmark, not in the user's cache
    history = out.parent.parent / "replicas-history.json"
    return [str(lnet_get), *urls, "-o", str(out), "--strategy", competitor, "--sha256", sha256, "--json",
            "--no-progress", "--history", str(history), *lnet_args]


async def one_run(tb: Testbed, servers: Replicas, competitor: str, urls: list[str], out: Path, size: int,
                  sha256: str, tools: dict[str, str], lnet_get: Path, lnet_args: list[str],
                  timeout_s: float) -> dict[str, Any]:
    argv = competitor_argv(competitor, urls, out, sha256, tools, lnet_get, lnet_args)
    record: dict[str, Any] = {"ok": False, "argv": argv}
    servers.mark()
    started = trio.current_time()
    done: subprocess.CompletedProcess[bytes] | None = None
    with trio.move_on_after(timeout_s):
        done = await tb.run(CLIENT, argv, check=False)
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
        if competitor != "aria2":
            try:
                report = json.loads(done.stdout)
            except ValueError:
                report = {"ok": False, "unparsed_stdout": done.stdout.decode(errors="replace")[-1500:]}
            record["lnet"] = report
            if report.get("seconds") is not None:
                record["own_s"] = float(report["seconds"])
        wrong = await trio.to_thread.run_sync(check_output, out, size, sha256)
        if wrong:
            record["error"] = wrong
        else:
            record["ok"] = True
    await trio.to_thread.run_sync(empty_dir, out.parent)
    return record


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
    rows = []
    for scenario, label, competitor in plan:
        mine = [r for r in runs if (r["scenario"], r["size"], r["competitor"]) == (scenario, label, competitor)]
        ok = [r for r in mine if r["ok"]]
        wall = median([r["wall_s"] for r in ok])
        own = median([r["own_s"] for r in ok if "own_s" in r])
        limit_s = sizes[label] * 8 / (limits[scenario] * 1e6)
        per_host = {h: median([shares(r["nginx"])[h] for r in ok]) for h in hosts}
        rows.append({
            "scenario": scenario, "size": label, "competitor": competitor, "runs": len(mine), "ok": len(ok),
            "median_wall_s": wall, "median_own_s": own,
            "median_mbps": sizes[label] * 8 / wall / 1e6 if wall else None,
            "physical_limit_s": limit_s, "share_of_limit": limit_s / wall if wall else None,
            "replicas_used_nginx": min((nginx_replicas_used(r) for r in ok), default=None),
            "replicas_used_lnet": min((u for r in ok if (u := lnet_replicas_used(r)) is not None), default=None),
            "median_shares": per_host,
            "median_overfetch": median([r["sent_bytes"] / sizes[label] for r in ok]),
            "errors": [r["error"] for r in mine if not r["ok"]],
        })
    for row in rows:
        aria = next((x for x in rows if (x["scenario"], x["size"], x["competitor"]) ==
                     (row["scenario"], row["size"], "aria2")), None)
        row["speedup_vs_aria2"] = (aria["median_wall_s"] / row["median_wall_s"]
                                   if aria and aria["median_wall_s"] and row["median_wall_s"] else None)
    return rows


def targets(rows: list[dict[str, Any]], runs: list[dict[str, Any]], n_replicas: int) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if row["competitor"] != "mdtp":
            continue
        where = f"{row['scenario']}, {row['size']}"
        want = {"normal": TARGET_NORMAL_SPEEDUP, "throttled": TARGET_THROTTLED_SPEEDUP}.get(row["scenario"])
        if want is not None and row["speedup_vs_aria2"] is not None:
            out.append({"target": f"mdtp >= {want}x aria2 ({where})", "value": f"{row['speedup_vs_aria2']:.2f}x",
                        "met": row["speedup_vs_aria2"] >= want})
        mine = [r for r in runs if r["ok"] and (r["scenario"], r["size"], r["competitor"]) ==
                (row["scenario"], row["size"], "mdtp")]
        if mine:
            used = [lnet_replicas_used(r) for r in mine]
            out.append({"target": f"mdtp uses every replica in every run ({where})",
                        "value": "/".join("?" if u is None else str(u) for u in used) + f" of {n_replicas}",
                        "met": all(u == n_replicas for u in used)})
        if row["share_of_limit"] is not None:
            out.append({"target": f"mdtp >= {TARGET_LIMIT_SHARE:.0%} of the physical limit ({where})",
                        "value": f"{row['share_of_limit']:.1%}", "met": row["share_of_limit"] >= TARGET_LIMIT_SHARE})
    return out


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]], hosts: list[str]) -> None:
    print()
    print(f"{'scenario':<10} {'size':>7} {'competitor':<15} {'ok':>5} {'wall s':>8} {'own s':>7} {'Mbit/s':>7} "
          f"{'of limit':>8} {'vs aria2':>8} {'used':>5}  {'nginx shares ' + '/'.join(hosts):<32} {'sent/size':>9}")
    for r in rows:
        name = r["competitor"] if r["competitor"] == "aria2" else f"lnet {r['competitor']}"
        used = "-" if r["replicas_used_nginx"] is None else str(r["replicas_used_nginx"])
        share_text = "/".join(fmt(None if v is None else 100 * v, ".0f") for v in r["median_shares"].values())
        print(f"{r['scenario']:<10} {r['size']:>7} {name:<15} {r['ok']:>2}/{r['runs']:<2} "
              f"{fmt(r['median_wall_s'], '.2f'):>8} {fmt(r['median_own_s'], '.2f'):>7} "
              f"{fmt(r['median_mbps'], '.1f'):>7} {fmt(r['share_of_limit'], '.1%'):>8} "
              f"{fmt(r['speedup_vs_aria2'], '.2f'):>8} {used:>5}  {share_text + ' %':<32} "
              f"{fmt(r['median_overfetch'], '.3f'):>9}")


# -- the benchmark ---------------------------------------------------------------------------------------------
def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip().removeprefix("lnet-").removeprefix("lnet ") for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise SystemExit(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


async def bench(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    sizes = {label: parse_size(label) for label in args.sizes.split(",") if label.strip()}
    scenarios = parse_list(args.scenarios, SCENARIOS, "scenario")
    small = parse_list(args.competitors, COMPETITORS, "competitor")
    large = parse_list(args.large_competitors, COMPETITORS, "competitor")
    large_from = parse_size(args.large_from)
    per_size = {label: (large if size >= large_from else small) for label, size in sizes.items()}
    lnet_get = Path(args.lnet_get)
    if any(c != "aria2" for cs in per_size.values() for c in cs) and not lnet_get_has_urls(lnet_get):
        raise SystemExit(f"{lnet_get} has no multi-source mode (no --strategy in its --help): run with "
                         "--competitors aria2 --large-competitors aria2, or --lnet-get PATH")
    tools = ensure_tools(say)
    result: dict[str, Any] = {"bench": "multisource", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "topology": str(TOPOLOGY.relative_to(REPO)), "args": vars(args) | {"lnet_get": str(
                                  lnet_get)}, "tools": tool_versions(tools, lnet_get), "aria2_flags": ARIA2_FAIR,
                              "aria2_unattended_flags": ARIA2_UNATTENDED}
    workdir = await trio.to_thread.run_sync(make_workdir, args.workdir)
    try:
        root = workdir / "www"
        digests = {}
        for label, size in sizes.items():
            say(f"writing the {label} test file ...")
            digests[label] = await trio.to_thread.run_sync(write_payload, root / label / "file.bin", size)
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
            plan = [(s, label, c) for s in scenarios for label in sizes for c in per_size[label]]
            total = len(plan) * args.runs
            runs: list[dict[str, Any]] = []
            for scenario in scenarios:
                await set_scenario(tb, scenario, base.delay_ms, base.rate_mbit)
                limits[scenario] = physical_limit_mbit(tb, hosts)
                say(f"== {scenario}: r1 {tb.topology.link(EDGE, FASTEST).rate_mbit:g} Mbit/s, one-way "
                    f"{tb.topology.link(EDGE, FASTEST).delay_ms:g} ms; physical limit {limits[scenario]:g} Mbit/s")
                if args.capacity_seconds > 0:
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
                        urls = [servers.url(h, f"{label}/file.bin") for h in hosts]
                        limit_s = size * 8 / (limits[scenario] * 1e6)
                        for competitor in per_size[label]:
                            out = downloads / f"{competitor}.bin"
                            record = await one_run(tb, servers, competitor, urls, out, size, digests[label], tools,
                                                   lnet_get, args.lnet_arg, args.timeout_factor * limit_s + 60)
                            record.update(scenario=scenario, size=label, competitor=competitor, rep=rep)
                            runs.append(record)
                            sh = "/".join(f"{100 * v:.0f}" for v in shares(record["nginx"]).values())
                            if record["ok"]:
                                own = f", lnet's own {record['own_s']:.2f} s" if "own_s" in record else ""
                                text = (f"{record['wall_s']:7.2f} s ({size * 8 / record['wall_s'] / 1e6:6.1f} Mbit/s,"
                                        f" {limit_s / record['wall_s']:.0%} of limit{own}), nginx shares {sh} %")
                            else:
                                text = f"FAILED: {record['error'][:300]}"
                            say(f"[{len(runs):>3}/{total}] {scenario:<9} {label:>7} {competitor:<10} rep {rep}: {text}")
            await set_scenario(tb, "normal", base.delay_ms, base.rate_mbit)
            result["emulator"] = {k: v for k, v in (await tb.status()).items() if k not in ("hosts", "links")}
        result.update(capacity=capacity, physical_limit_mbit=limits, runs=runs)
        rows = summarise(runs, plan, limits, sizes, hosts)
        result["summary"] = rows
        result["targets"] = targets(rows, runs, len(hosts))
        result["hosts"] = hosts
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256MiB,1GiB", help="comma-separated (default 256MiB,1GiB)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: normal,latency,throttled")
    parser.add_argument("--competitors", default=",".join(COMPETITORS),
                        help="below --large-from (default: aria2 and every lnet strategy)")
    parser.add_argument("--large-competitors", default="aria2,mdtp", help="at --large-from and above")
    parser.add_argument("--large-from", default="1GiB")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each (default 3; medians reported)")
    parser.add_argument("--capacity-seconds", type=float, default=15.0,
                        help="curl each replica alone for about this long first (0: skip)")
    parser.add_argument("--lnet-arg", action="append", default=[], help="extra argument for lnet-get (repeatable)")
    parser.add_argument("--lnet-get", default=str(REPO / ".venv" / "bin" / "lnet-get"))
    parser.add_argument("--timeout-factor", type=float, default=10.0,
                        help="a run is stopped after this many times the physical limit, plus 60 s")
    parser.add_argument("--workdir", default=None, help="where the temporary files go (default: the system's)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if os.geteuid() != 0:
        print("this benchmark needs root (network namespaces for the testbed)", file=sys.stderr)
        return 1

    def say(text: str) -> None:
        print(text, flush=True)

    with bench_lock(say):
        result = await bench(args, say)
    rows, checks = result["summary"], result["targets"]
    print_table(rows, result["hosts"])
    print("\nphysical limits (Mbit/s): " + ", ".join(f"{s} {v:g}" for s, v in result["physical_limit_mbit"].items()))
    for scenario, cap in result["capacity"].items():
        print(f"reachable in {scenario} (sum of each replica's curl alone): {cap['sum_mbps']:.1f} Mbit/s")
    print("\ntargets (issue 6):")
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
