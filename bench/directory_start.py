"""What 300 registered depots add to a transfer's start: lnet-send over a directory against the same send with a
depots file that names only the destination.

    .venv/bin/python bench/directory_start.py [--depots 300] [--runs 5] [--size 4MiB] [--hosts 2]

Starts a real etcd on loopback, then ``--hosts`` processes that serve ``--depots`` depots between them, each through
``lnet.depot.server.serve`` with ``directory`` set (its own registration, as ``lnet-depot --directory`` runs it).
Once every depot is listed, each run sends the same ``--size`` file to ``d000`` in a fresh process with a fresh
state directory (no edge memory, no cached listing), twice, in turn:

- **file**: a depots file naming only ``d000``: nothing to discover, nothing to choose;
- **directory**: a depots file naming no depot and ``--directory``: the listing read and checked, every depot's
  ``/v1/status`` and round trip asked at once, the path chosen among 300 candidates.

Reports each run's wall-clock time from spawn to exit and the medians; their difference is what discovery and
candidate choice over the directory's depots add to a transfer's start. All on one machine: the depots share its
cores with the client, so each status answer costs more than it would from 300 hosts. Needs the etcd binary
(Debian's etcd-server); no root. Writes bench/results/directory-start-TIME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lnet.depot.config import DepotConfig  # noqa: E402
from lnet.depot.server import serve  # noqa: E402
from lnet.directory.entries import DEFAULT_PREFIX  # noqa: E402
from lnet.directory.etcd import EtcdClient, EtcdSettings  # noqa: E402
from lnet.directory.listing import list_depots  # noqa: E402
from lnet.units import parse_size  # noqa: E402
from tests.directory.etcd_server import ETCD, EtcdServer  # noqa: E402

MiB = 1024 * 1024


async def _serve_depots(first: int, count: int, etcd_url: str, data: Path) -> None:
    """``count`` depots from ``d{first}``, in this process, each registered in the directory; until SIGTERM."""
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        for i in range(first, first + count):
            config = DepotConfig(name=f"d{i:03d}", listen="127.0.0.1:0", capacity=256 * MiB, max_allocation=64 * MiB,
                                 data_dir=data / f"d{i:03d}", directory=(etcd_url,), log_level="warning")
            await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        print("serving", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        stop.set()


async def _all_listed(etcd_url: str, depots: int, timeout_s: float) -> None:
    async with EtcdClient(EtcdSettings((etcd_url,), timeout_s=5.0)) as client:
        with trio.fail_after(timeout_s):
            while True:
                listing = await list_depots(client, DEFAULT_PREFIX)
                if len(listing.depots) >= depots:
                    return
                await trio.sleep(0.5)


def _send(args: list[str], state: Path) -> float:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(state)}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lnet.client.commands.send", *args, "--memory",
                           str(state / "memory.json"), "--json"], capture_output=True, env=env, check=False)
    took = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"lnet-send failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depots", type=int, default=300)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--size", default="4MiB", help="the file sent each run (default 4MiB, in 1 MiB blocks)")
    p.add_argument("--hosts", type=int, default=2, help="processes the depots are served by (default 2)")
    p.add_argument("--serve", nargs=4, metavar=("FIRST", "COUNT", "ETCD", "DATA"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        first, count, etcd_url, data = args.serve
        trio.run(_serve_depots, int(first), int(count), etcd_url, Path(data))
        return
    if ETCD is None:
        sys.exit("no etcd binary: apt-get install etcd-server")
    with tempfile.TemporaryDirectory(prefix="lnet-dirstart-") as tmp_name, \
            EtcdServer(Path(tmp_name) / "etcd") as etcd:
        tmp = Path(tmp_name)
        per_host = -(-args.depots // args.hosts)
        hosts = []
        try:
            for first in range(0, args.depots, per_host):
                count = min(per_host, args.depots - first)
                hosts.append(subprocess.Popen(
                    [sys.executable, __file__, "--serve", str(first), str(count), etcd.url, str(tmp / "depots")],
                    stdout=subprocess.PIPE, stderr=open(tmp / f"host{first}.log", "wb")))  # noqa: SIM115
            for host in hosts:
                assert host.stdout is not None
                if host.stdout.readline().strip() != b"serving":
                    sys.exit(f"a depot host did not start: see {tmp}")
            trio.run(_all_listed, etcd.url, args.depots, 60.0)
            print(f"{args.depots} depots registered and serving", flush=True)
            runs = _runs(args, etcd.url, tmp)
        finally:
            for host in hosts:
                host.send_signal(signal.SIGTERM)
            for host in hosts:
                try:
                    host.wait(30)
                except subprocess.TimeoutExpired:
                    host.kill()
    file_s = statistics.median(r["file_s"] for r in runs)
    directory_s = statistics.median(r["directory_s"] for r in runs)
    added = [r["directory_s"] - r["file_s"] for r in runs]
    print(f"\n{args.depots} depots, {args.size} to d000, medians of {args.runs} (range):")
    print(f"  depots file naming d000 only: {file_s:.2f} s "
          f"({min(r['file_s'] for r in runs):.2f}-{max(r['file_s'] for r in runs):.2f})")
    print(f"  --directory, {args.depots} depots listed: {directory_s:.2f} s "
          f"({min(r['directory_s'] for r in runs):.2f}-{max(r['directory_s'] for r in runs):.2f})")
    print(f"  added: {statistics.median(added):.2f} s ({min(added):.2f}-{max(added):.2f})")
    out = ROOT / "bench" / "results" / f"directory-start-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    out.write_text(json.dumps({
        "command": " ".join(["bench/directory_start.py", *sys.argv[1:]]), "commit": commit,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "depots": args.depots, "size": args.size,
        "hosts": args.hosts, "runs": runs,
        "median": {"file_s": file_s, "directory_s": directory_s, "added_s": statistics.median(added)},
    }, indent=1) + "\n")
    print(f"  {out.relative_to(ROOT)}")


def _runs(args: argparse.Namespace, etcd_url: str, tmp: Path) -> list[dict[str, float]]:
    source = tmp / "payload.bin"
    source.write_bytes(os.urandom(parse_size(args.size)))
    d000 = trio.run(_url_of_d000, etcd_url)
    only_dest = tmp / "only-d000.toml"
    only_dest.write_text(f'here = "me"\n[depots.d000]\nurl = "{d000}"\n')
    from_directory = tmp / "directory.toml"
    from_directory.write_text(f'here = "me"\ndirectory = "{etcd_url}"\n')
    runs = []
    for run in range(args.runs):
        common = [str(source), "--to", "d000", "--block-size", "1MiB"]
        result = {}
        for kind, depots in (("file", only_dest), ("directory", from_directory)):
            state = tmp / f"state-{run}-{kind}"
            state.mkdir()
            result[f"{kind}_s"] = _send([*common, "--depots", str(depots),
                                         "--manifest", str(state / "m.json")], state)
        runs.append(result)
        print(f"run {run + 1}: file {result['file_s']:.2f} s, directory {result['directory_s']:.2f} s", flush=True)
    return runs


async def _url_of_d000(etcd_url: str) -> str:
    async with EtcdClient(EtcdSettings((etcd_url,), timeout_s=5.0)) as client:
        listing = await list_depots(client, DEFAULT_PREFIX)
    return listing.depots["d000"].url


if __name__ == "__main__":
    main()
