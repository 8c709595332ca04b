"""The three-depot loopback chain alone, with CPU per GiB of every process and, optionally, py-spy profiles.

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/chain_profile.py [--total 256MiB] [--block 8MiB]
        [--runs 3] [--duration 10m] [--py-spy DIR] [--perf DIR] [--strace DIR] [--send-arg=--max-inflight=4 ...]

Starts depots a, b and c on loopback (data in /dev/shm), runs ``lnet-send FILE --to c --path a,b,c`` ``--runs``
times and prints, per run, the rate over lnet-send's own transfer time and the CPU seconds (user + system) per
GiB moved of lnet-send and of each depot, then the medians. With ``--py-spy DIR``, the last run is recorded by
py-spy (``--format raw``, ``--gil`` off, idle frames off) on lnet-send and every depot, into DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lnet.units import parse_size  # noqa: E402
from tests.depot.processes import depot_process  # noqa: E402

GiB = 1024**3
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None


def faults_of(pid: int) -> int:
    """Minor page faults of ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[7])  # minflt: the 10th field, the 8th after the command name


async def requests_of(url: str) -> dict[str, float]:
    """The depot's requests so far by operation, from its ``/metrics``."""
    async with httpx.AsyncClient(trust_env=False) as http:
        text = (await http.get(f"{url}/metrics")).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("lnet_depot_requests_total{"):
            labels, _, value = line.rpartition(" ")
            operation = labels.split('operation="', 1)[1].split('"', 1)[0]
            if operation != "metrics":
                counts[operation] = counts.get(operation, 0.0) + float(value)
    return counts


def cpu_of(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", default="256MiB")
    parser.add_argument("--block", default="8MiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", default="10m", help="the blocks' lifetime at c (default 10m; shorter lets "
                        "c forget earlier runs' blocks on long series)")
    parser.add_argument("--py-spy", type=Path, metavar="DIR")
    parser.add_argument("--perf", type=Path, metavar="DIR", help="record the last run with `perf record` (kernel "
                        "and user, what py-spy does not see) on lnet-send and every depot, into DIR/NAME.data")
    parser.add_argument("--strace", type=Path, metavar="DIR", help="count the last run's system calls with "
                        "`strace -c -f` on lnet-send and every depot, into DIR/NAME.txt (slows the run down)")
    parser.add_argument("--send-arg", action="append", default=[], help="an extra lnet-send argument")
    args = parser.parse_args()
    total, block = parse_size(args.total), parse_size(args.block)
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        work = Path(tmp)
        source = work / "src"
        with source.open("wb") as out:
            for _ in range(total // block):
                out.write(os.urandom(block))
        common = ["--capacity", str(2 * total + block), "--max-allocation", str(block), "--log-level", "warning"]
        async with (
            depot_process("--data-dir", f"{tmp}/a", *common) as a,
            depot_process("--data-dir", f"{tmp}/b", *common) as b,
            depot_process("--data-dir", f"{tmp}/c", *common, "--capacity", str((args.runs + 2) * total)) as c,
        ):
            depots = {"a": a, "b": b, "c": c}
            depots_file = work / "depots.toml"
            depots_file.write_text('here = "bench"\n' + "".join(
                f'[depots.{name}]\nurl = "{d.url}"\n' for name, d in depots.items()
            ))
            for run in range(args.runs):
                argv = [
                    sys.executable, "-m", "lnet.client.send", str(source), "--to", "c", "--path", "a,b,c",
                    "--depots", str(depots_file), "--memory", str(work / "edges.json"), "--block-size", str(block),
                    "--manifest", str(work / f"m{run}.json"), "--duration", args.duration, "--json", "--no-progress",
                    "--restart", *args.send_arg,
                ]
                before = {name: cpu_of(d.process.pid) for name, d in depots.items()}
                faults = {name: faults_of(d.process.pid) for name, d in depots.items()}
                asked = {name: await requests_of(d.url) for name, d in depots.items()}
                # Popen, polled below: the CPU meter samples the process while it runs
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # noqa: ASYNC220
                spies: list[subprocess.Popen[bytes]] = []
                if args.py_spy and run == args.runs - 1:
                    args.py_spy.mkdir(parents=True, exist_ok=True)
                    for name, pid in [("send", proc.pid)] + [(n, d.process.pid) for n, d in depots.items()]:
                        spies.append(subprocess.Popen(  # noqa: ASYNC220
                            [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate",
                             "200", "--pid", str(pid), "--output", str(args.py_spy / f"{name}.txt"), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        ))
                last = run == args.runs - 1
                for tool, out_dir in (("perf", args.perf), ("strace", args.strace)):
                    if out_dir is None or not last:
                        continue
                    out_dir.mkdir(parents=True, exist_ok=True)
                    for name, pid in [("send", proc.pid)] + [(n, d.process.pid) for n, d in depots.items()]:
                        command = (
                            ["perf", "record", "-F", "999", "-p", str(pid), "-o", str(out_dir / f"{name}.data")]
                            if tool == "perf" else
                            ["strace", "-c", "-f", "-p", str(pid), "-o", str(out_dir / f"{name}.txt")]
                        )
                        spies.append(subprocess.Popen(  # noqa: ASYNC220
                            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                send_cpu = 0.0
                ps = psutil.Process(proc.pid)
                while proc.poll() is None:
                    try:
                        t = ps.cpu_times()
                        send_cpu = t.user + t.system
                    except psutil.Error:
                        pass
                    await trio.sleep(0.02)
                out, err = proc.communicate()
                for spy in spies:
                    spy.send_signal(2)
                for spy in spies:
                    spy.wait(timeout=30)
                if proc.returncode != 0:
                    print(err.decode()[-3000:])
                    return 1
                report = json.loads(out.decode().strip().splitlines()[-1])
                moved = report["bytes"] / GiB
                row = {"MB/s": report["bytes"] / report["seconds"] / 1e6, "send": send_cpu / moved}
                for name, d in depots.items():
                    row[name] = (cpu_of(d.process.pid) - before[name]) / moved
                row["resends"] = report["resends"]
                blocks = max(1, int(report["blocks"]))
                for name, d in depots.items():
                    row[f"{name} faults/block"] = (faults_of(d.process.pid) - faults[name]) / blocks
                per_block: dict[str, float] = {}
                for name, d in depots.items():
                    for operation, count in (await requests_of(d.url)).items():
                        more = (count - asked[name].get(operation, 0.0)) / blocks
                        per_block[operation] = per_block.get(operation, 0.0) + more
                row["requests/block"] = sum(per_block.values())
                edges = ", ".join(f"{e['from']}->{e['to']} {e['mbps'] / 8:.0f}" for e in report.get("edges", []))
                rows.append(row)
                print(f"run {run + 1}: {row['MB/s']:.0f} MB/s; CPU-s/GiB send {row['send']:.2f} a {row['a']:.2f} "
                      f"b {row['b']:.2f} c {row['c']:.2f}; minor faults per block a {row['a faults/block']:.0f} "
                      f"b {row['b faults/block']:.0f} c {row['c faults/block']:.0f}; "
                      f"requests per block {row['requests/block']:.2f} ("
                      + ", ".join(f"{op} {n:.2f}" for op, n in sorted(per_block.items()) if n)
                      + f"); edges (MB/s) {edges}", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {len(rows)}: {med['MB/s']:.0f} MB/s; CPU-s/GiB send {med['send']:.2f} a {med['a']:.2f} "
          f"b {med['b']:.2f} c {med['c']:.2f} (sum {med['send'] + med['a'] + med['b'] + med['c']:.2f}); minor faults "
          f"per block a {med['a faults/block']:.0f} b {med['b faults/block']:.0f} c {med['c faults/block']:.0f}; "
          f"requests per block {med['requests/block']:.2f}; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
