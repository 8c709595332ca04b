"""A new client starting from the overlay's memory, on the emulated Abilene with the demo's settings (96 MiB,
1 MiB blocks, at most 2 blocks per hop at once, ORNL to Sunnyvale).

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/directory_memory.py [--runs 3] [--size 96MiB]

Brings up deploy/topologies/abilene.toml, an etcd on ORNL (a fresh data directory each run), and a depot on every
other host registered there (``--directory``). Each client's depots file names only the directory. Each run:
1. client A, nothing known: a cold start, after which A publishes its memory in the directory;
2. client A again: its warm start (its own memory) — the rate to match;
3. client B with an empty state directory: it starts from the overlay's memory (A's).
Reports B's Mbit/s over A's warm Mbit/s, medians of --runs, against the target of 0.9. Needs root.
Writes bench/results/directory-memory-TIME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from lnet.testbed import Testbed
from lnet.testbed.demo import DESTINATION, PORT, SOURCE, STARTUP_TIMEOUT_S, TOPOLOGY
from lnet.units import parse_size

ROOT = Path(__file__).resolve().parent.parent
ETCD_PORT = 2379


def _python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


async def _wait_for(process: trio.Process, text: bytes, what: str) -> None:
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(STARTUP_TIMEOUT_S):
        while text not in seen:
            chunk = await process.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"{what} exited: {seen.decode(errors='replace')[-2000:]}")
            seen += chunk


async def one_run(tb: Testbed, work: Path, payload: Path, block: str, inflight: int) -> dict[str, float]:
    etcd_dir = work / "etcd"
    shutil.rmtree(etcd_dir, ignore_errors=True)
    here = tb.address(SOURCE)
    url = f"http://{here}:{ETCD_PORT}"
    peer = f"http://127.0.0.1:{ETCD_PORT + 1}"
    etcd_bin = shutil.which("etcd")
    assert etcd_bin is not None
    etcd = await tb.spawn(SOURCE, [etcd_bin, "--data-dir", str(etcd_dir), "--listen-client-urls", url,
                                   "--advertise-client-urls", url, "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
                                   "--log-level", "warn", "--logger", "zap"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=(work / "etcd.log").open("ab"))
    with trio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            health = await tb.run(SOURCE, ["etcdctl", f"--endpoints={url}", "endpoint", "health"], check=False,
                                  env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"})
            if health.returncode == 0:
                break
            await trio.sleep(0.2)
    depots = []
    for host in tb.hosts:
        if host == SOURCE:
            continue
        process = await tb.spawn(host, _python(
            "lnet.depot.cli", "--listen", f"{tb.address(host)}:{PORT}", "--name", host, "--data-dir",
            str(work / "depots" / host), "--capacity", "2GiB", "--max-allocation", "64MiB", "--log-level", "warning",
            "--directory", url), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await _wait_for(process, b"serving on", f"the depot on {host}")
        depots.append(process)
    depots_file = work / "depots.toml"
    depots_file.write_text(f'here = "{SOURCE}"\ndirectory = "{url}"\n')
    with trio.fail_after(30):  # every depot registered
        while True:
            listed = await tb.run(SOURCE, _python("lnet.client.cli", "depots", "--depots", str(depots_file),
                                                  "--json"), check=False)
            if listed.stdout and len(json.loads(listed.stdout)["depots"]) == len(depots):
                break
            await trio.sleep(0.5)
    results: dict[str, float] = {}
    for name, state in (("cold", "a"), ("warm", "a"), ("overlay", "b")):
        state_dir = work / f"state-{state}"
        if name == "cold":
            shutil.rmtree(work / "state-a", ignore_errors=True)
            shutil.rmtree(work / "state-b", ignore_errors=True)
        argv = _python("lnet.client.send", str(payload), "--to", DESTINATION, "--depots", str(depots_file),
                       "--memory", str(state_dir / "edges.json"), "--block-size", block, "--max-inflight",
                       str(inflight), "--manifest", str(work / f"{name}.manifest.json"), "--json", "--no-progress")
        done = await tb.run(SOURCE, argv, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"lnet-send ({name}) failed: {done.stderr.decode(errors='replace')[-2000:]}")
        summary = json.loads(done.stdout)
        results[name] = float(summary["mbps"])
        print(f"  {name}: {summary['mbps']:.2f} Mbit/s, {summary['seconds']:.1f} s, ended on "
              f"{' -> '.join(summary['path'])}", flush=True)
        if name == "overlay" and b"starting from the overlay's" not in done.stderr:
            raise RuntimeError("client B did not start from the overlay's memory: "
                               + done.stderr.decode(errors="replace")[-1000:])
    for process in (*depots, etcd):
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
    results["ratio"] = results["overlay"] / results["warm"]
    return results


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--size", default="96MiB")
    p.add_argument("--block-size", default="1MiB")
    p.add_argument("--max-inflight", type=int, default=2)
    args = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="lnet-dirmem-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        payload = work / "payload.bin"
        payload.write_bytes(os.urandom(parse_size(args.size)))
        async with Testbed(str(TOPOLOGY), name=f"dirmem-{os.getpid() % 10000}") as tb:
            for run in range(args.runs):
                print(f"run {run + 1}:", flush=True)
                runs.append(await one_run(tb, work, payload, args.block_size, args.max_inflight))
                print(f"  overlay / warm = {runs[-1]['ratio']:.3f}", flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"\nmedians of {args.runs}: cold {median['cold']:.2f}, warm {median['warm']:.2f}, new client from the "
          f"overlay's memory {median['overlay']:.2f} Mbit/s; ratio {median['ratio']:.3f} (target 0.9)")
    out = ROOT / "bench" / "results" / f"directory-memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["bench/directory_memory.py", *sys.argv[1:]]),
                               "runs": runs, "median": median}, indent=1) + "\n")
    print(out.relative_to(ROOT))


if __name__ == "__main__":
    trio.run(main)
