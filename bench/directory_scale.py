"""The depot directory at scale: 300 depots registered in a real etcd on loopback, through lnet's own
registration (``lnet.directory.registration.Registration``, one per depot, as ``lnet-depot --directory`` runs it),
each entry changing (its free space) every second so that every rewrite the pacing allows happens.

    .venv/bin/python bench/directory_scale.py [--depots 300] [--seconds 30] [--runs 3]

Reports, medians of --runs:
- `lnet depots --directory URL --json` in a fresh process: its wall-clock time from spawn to exit, and that it
  listed every depot;
- the listing alone in process (a range read of the prefix and every entry checked), and ``discover`` as a
  transfer's start runs it (listing, checks, the cached copy written, the merge with a depots file);
- the directory's write rate over --seconds: entry writes (puts) and lease renewals a second, all depots together,
  against the documented bound (one rewrite per depot per ``directory_rewrite_interval``, 10 s; one renewal per
  third of the 15 s TTL).
Needs the etcd binary (Debian's etcd-server); no root, no testbed. Writes bench/results/directory-scale-TIME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lnet.client.commands.discover import discover  # noqa: E402
from lnet.directory.entries import DEFAULT_PREFIX, DepotRecord, depot_key  # noqa: E402
from lnet.directory.etcd import EtcdClient, EtcdSettings  # noqa: E402
from lnet.directory.listing import list_depots  # noqa: E402
from lnet.directory.registration import Registration  # noqa: E402
from tests.directory.etcd_server import ETCD, EtcdServer  # noqa: E402

MiB = 1024 * 1024
PUTS = "etcd_mvcc_put_total"
RENEWALS = "etcd_debugging_lease_renewed_total"


def _record(i: int, wall: float) -> DepotRecord:
    free = int((wall * 7 + i) % 64) * MiB  # changes every second: the pacing decides when it is written
    return DepotRecord(f"d{i:03d}", f"http://127.0.{i // 250}.{i % 250 + 1}:6714", 64 * MiB, free, 8 * MiB, 86400.0,
                       (), "0.1.0", 1, round(wall, 3))  # open depots: a client takes each (one that wants a
    # token for allocating is left out of a transfer unless the depots file gives the token)


async def _measure(etcd: EtcdServer, depots: int, seconds: float, state: Path) -> dict[str, float]:
    settings = EtcdSettings((etcd.url,), timeout_s=5.0)
    async with EtcdClient(settings) as client, trio.open_nursery() as nursery:
        stop = trio.Event()
        registrations = [
            Registration(client, depot_key(DEFAULT_PREFIX, f"d{i:03d}"), lambda wall, i=i: _record(i, wall))
            for i in range(depots)
        ]
        for registration in registrations:
            nursery.start_soon(registration.run, stop)
        with trio.fail_after(60):
            for registration in registrations:
                await registration.registered()
        # the write rate, once every depot has registered (its first write is not steady state)
        writes0 = sum(r.status.writes for r in registrations)
        started = trio.current_time()
        puts0 = await _counter(etcd, PUTS)
        keepalives0 = await _counter(etcd, RENEWALS)
        await trio.sleep(seconds)
        elapsed = trio.current_time() - started
        writes = sum(r.status.writes for r in registrations) - writes0
        puts = await _counter(etcd, PUTS) - puts0
        keepalives = await _counter(etcd, RENEWALS) - keepalives0

        began = time.perf_counter()
        listing = await list_depots(client, DEFAULT_PREFIX)
        listing_s = time.perf_counter() - began
        assert len(listing.depots) == depots, len(listing.depots)

        depots_file = state / "depots.toml"
        depots_file.write_text('here = "me"\n[depots.mine]\nurl = "http://192.0.2.1:6714"\n')
        began = time.perf_counter()
        found = await discover(depots_file, etcd.url, state_dir=state, timeout_s=5.0)
        discover_s = time.perf_counter() - began
        assert len(found.overlay.depots) == depots + 1, (len(found.overlay.depots), found.notes[:3])

        env = {**os.environ, "LNET_DEPOTS": str(depots_file)}
        began = time.perf_counter()
        done = await trio.run_process([sys.executable, "-m", "lnet.client.cli", "depots", "--directory", etcd.url,
                                       "--json"], capture_stdout=True, capture_stderr=True, env=env, check=False)
        command_s = time.perf_counter() - began
        listed = json.loads(done.stdout)
        registered = sum(1 for d in listed["depots"] if d["state"] == "registered")
        stop.set()
    return {"writes_per_s": writes / elapsed, "etcd_puts_per_s": puts / elapsed,
            "keepalives_per_s": keepalives / elapsed, "listing_s": listing_s,
            "discover_s": discover_s, "command_s": command_s, "command_listed": registered}


async def _counter(etcd: EtcdServer, name: str) -> float:
    """One of etcd's own counters (its /metrics)."""
    import httpx

    async with httpx.AsyncClient() as http:
        text = (await http.get(etcd.url + "/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depots", type=int, default=300)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    if ETCD is None:
        sys.exit("no etcd binary: apt-get install etcd-server")
    runs = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="lnet-dirbench-") as tmp, EtcdServer(Path(tmp) / "etcd") as etcd:
            result = trio.run(_measure, etcd, args.depots, args.seconds, Path(tmp))
        runs.append(result)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    bound_writes = args.depots / 10.0
    bound_keepalives = args.depots / 5.0
    print(f"\n{args.depots} depots registered, medians of {args.runs} runs:")
    print(f"  lnet depots --directory --json (a fresh process): {median['command_s']:.2f} s, "
          f"{median['command_listed']:.0f} listed")
    print(f"  listing in process: {median['listing_s'] * 1000:.0f} ms; discover (a transfer's start): "
          f"{median['discover_s'] * 1000:.0f} ms")
    print(f"  entry writes: {median['writes_per_s']:.1f}/s as the depots count them, {median['etcd_puts_per_s']:.1f}/s "
          f"as etcd counts its puts (bound {bound_writes:.0f}/s); "
          f"lease renewals: {median['keepalives_per_s']:.1f}/s (bound {bound_keepalives:.0f}/s)")
    out = ROOT / "bench" / "results" / f"directory-scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["bench/directory_scale.py", *sys.argv[1:]]), "depots": args.depots,
                               "seconds": args.seconds, "runs": runs, "median": median}, indent=1) + "\n")
    print(f"  {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
