"""Many small files over a long, fat link: lnet's small-file planner against a fixed pipelining depth and tar.

    flock /tmp/lnet-bench.lock ./run bench small_files [--rtt-ms 50,100] [--scale 1.0] [--seed 2]

Wu et al.'s experiment (Sect. 4): 500 files of 0-100 KB and 500 of 1-2 MB (sizes drawn uniformly from a
seeded generator; KB and MB are 10^3 and 10^6 bytes), one 100 Mbit/s link, 50 ms and 100 ms round trip (the
testbed's delay_ms is one way: 25 and 50), TCP windows well above the BDP. Two hosts: the client, and a depot as
the destination. Half the files are named ``p-*`` (drawn at random across both sizes, the seed's AVG case), so that
the priority run only adds ``--priority 'p-*'``. For each round trip, after one warm-up send of 128 MiB (so that
the edge memory knows the link's rate, as it would after any earlier transfer; every run starts from that same
memory):
  (a) lnet-send DIR: the planner (bucket divide, transmission queue, packing, tuned depth);
  (b) lnet-send DIR --pipeline-depth 2: the seed's DEFAULT, a fixed depth of 2, through the same code;
  (c) lnet-send DIR --priority 'p-*': half the files high priority;
  (d) tar -c | one TCP connection | a receiver that counts the bytes (tar's own ceiling: nothing is unpacked).
The depot is restarted before each run (the blocks stay allocated for --duration; a fresh depot frees them).
Throughput is the files' bytes over the transfer's time: for lnet the relay's own (first block out to last block
verified at the destination), with the whole command's wall-clock time shown beside it; for tar, connect to EOF.
Targets: (a) >= 90% of the link rate and >= 1.1 x (b); in (c) every priority file arrives before the
last ordinary file and throughput is at most 3% below (a). Prints a table; writes bench/results/small_files.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.testbed import Testbed, Topology  # noqa: E402

PY = sys.executable
PORT = 6714
TAR_PORT = 6999
LINK_MBIT = 100.0
KB, MB = 1000, 1000 * 1000
WARMUP_BYTES = 128 * 1024 * 1024  # long enough for the edge memory to learn the link, not its slow start

RECEIVER = r"""
import json, socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
conn, _ = server.accept()
n = 0
while chunk := conn.recv(1 << 20):
    n += len(chunk)
conn.sendall(json.dumps({"bytes": n}).encode())
conn.close()
"""

SENDER = r"""
import json, socket, subprocess, sys, time
address, port, source = sys.argv[1], int(sys.argv[2]), sys.argv[3]
started = time.perf_counter()
conn = socket.create_connection((address, port))
tar = subprocess.Popen(["tar", "-cf", "-", "-C", source, "."], stdout=subprocess.PIPE)
while chunk := tar.stdout.read(1 << 20):
    conn.sendall(chunk)
tar.wait()
conn.shutdown(socket.SHUT_WR)
reply = json.loads(conn.recv(4096))
print(json.dumps({"bytes": reply["bytes"], "seconds": time.perf_counter() - started}))
"""


def make_files(root: Path, seed: int, scale: float) -> tuple[int, int]:
    """The seed's file set under ``root`` (ten directories); returns (files, bytes). Same seed, same files."""
    rng = random.Random(seed)
    count = max(2, round(500 * scale))
    sizes = [rng.randint(0, 100 * KB) for _ in range(count)] + [rng.randint(1 * MB, 2 * MB) for _ in range(count)]
    priority = set(rng.sample(range(len(sizes)), len(sizes) // 2))
    order = list(range(len(sizes)))
    rng.shuffle(order)
    stamp = root / ".complete"
    if stamp.exists() and stamp.read_text() == f"{seed} {scale}":
        return len(sizes), sum(sizes)
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    for n, i in enumerate(order):
        directory = root / f"dir{n % 10:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{'p-' if i in priority else ''}file{n:04d}.dat"
        (directory / name).write_bytes(rng.randbytes(sizes[i]))
    stamp.write_text(f"{seed} {scale}")
    return len(sizes), sum(sizes)


def topology(delay_ms: float) -> Topology:
    return Topology.parse(
        'name = "smallf"\n[defaults]\nwindow = "16MiB"\ncongestion = "cubic"\n[hosts.client]\n[hosts.depot]\n'
        f'[[links]]\na = "client"\nb = "depot"\ndelay_ms = {delay_ms}\nrate_mbit = {LINK_MBIT}\n'
    )


async def start_depot(tb: Testbed, data_dir: Path) -> trio.Process:
    argv = [PY, "-m", "lnet.depot.cli", "--listen", f"{tb.address('depot')}:{PORT}", "--name", "depot",
            "--data-dir", str(data_dir), "--capacity", "4GiB", "--max-allocation", "64MiB", "--log-level", "warning"]
    process = await tb.spawn("depot", argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(30):
        while b"serving on" not in seen:
            chunk = await process.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"the depot exited: {seen.decode(errors='replace')}")
            seen += chunk
    return process


async def stop(process: trio.Process) -> None:
    process.terminate()
    with trio.move_on_after(10):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


def arrival_check(summary: dict[str, Any]) -> dict[str, Any]:
    arrivals = summary["arrivals"]
    last_priority = max((a["t"] for a in arrivals if a["priority"]), default=0.0)
    last_ordinary = max((a["t"] for a in arrivals if not a["priority"]), default=0.0)
    late = sum(1 for a in arrivals if a["priority"] and a["t"] >= last_ordinary)
    return {"last_priority_s": last_priority, "last_ordinary_s": last_ordinary, "priority_after_last_ordinary": late,
            "priority_files": sum(1 for a in arrivals if a["priority"])}


async def run_rtt(rtt_ms: float, files: Path, nbytes: int, out: Path, say: Any, only: str = "abcd") -> dict[str, Any]:
    results: dict[str, Any] = {}
    learnt = out / f"edges-{rtt_ms:g}.json"
    learnt.unlink(missing_ok=True)
    memory = out / "edges-run.json"
    warmup = out / "warmup.bin"
    if not warmup.exists() or warmup.stat().st_size != WARMUP_BYTES:
        warmup.write_bytes(random.Random(0).randbytes(WARMUP_BYTES))
    async with Testbed(topology(rtt_ms / 2), name="smallf") as tb:
        depots = out / "depots.toml"
        depots.write_text(f'here = "client"\n[depots.depot]\nurl = "http://{tb.address("depot")}:{PORT}"\n')

        async def lnet(label: str, source: Path, *extra: str) -> dict[str, Any]:
            # every run starts from what the warm-up learnt, not from what the run before it did
            memory.unlink(missing_ok=True)
            if learnt.exists():
                shutil.copyfile(learnt, memory)
            depot = await start_depot(tb, out / "depot-data")
            try:
                argv = [PY, "-m", "lnet.client.send", str(source), "--to", "depot", "--depots", str(depots),
                        "--memory", str(memory), "--json", "--no-progress", "--duration", "10m",
                        "--manifest", str(out / f"{label}.manifest.json"), *extra]
                started = time.perf_counter()
                done = await tb.run("client", argv)
                wall = time.perf_counter() - started
            finally:
                await stop(depot)
            (out / f"{label}.summary.json").write_bytes(done.stdout)  # the timeline and arrivals, for a closer look
            summary: dict[str, Any] = json.loads(done.stdout)
            summary["wall_seconds"] = wall
            return summary

        say(f"  RTT {rtt_ms:g} ms: warm-up send of {WARMUP_BYTES >> 20} MiB ...")
        warm = await lnet("warmup", warmup)
        shutil.copyfile(memory, learnt)
        say(f"    {warm['mbps']:.1f} Mbit/s; the edge memory now says "
            f"{json.loads(learnt.read_text())['edges'][0]['throughput_bps'] * 8 / 1e6:.1f} Mbit/s")
        runs = {"a": ("lnet planner", []), "b": ("lnet --pipeline-depth 2", ["--pipeline-depth", "2"]),
                "c": ("lnet, half the files priority", ["--priority", "p-*"])}
        for key, (label, extra) in runs.items():
            if key not in only:
                continue
            say(f"  RTT {rtt_ms:g} ms: ({key}) {label} ...")
            summary = await lnet(f"{key}-{rtt_ms:g}", files, *extra)
            row = {
                "label": label,
                "mbps": nbytes * 8 / 1e6 / summary["seconds"],
                "wall_mbps": nbytes * 8 / 1e6 / summary["wall_seconds"],
                "seconds": summary["seconds"],
                "wall_seconds": summary["wall_seconds"],
                "plan": summary["plan"],
                "resends": summary["resends"],
            }
            if key == "c":
                row["priority"] = arrival_check(summary)
            results[key] = row
            say(f"    {row['mbps']:.1f} Mbit/s ({row['wall_mbps']:.1f} wall-clock), plan {summary['plan']}")
            if key == "c":
                say(f"    priority: {row['priority']}")
        if "d" not in only:
            return results
        say(f"  RTT {rtt_ms:g} ms: (d) tar | one TCP connection ...")
        receiver = await tb.spawn("depot", [PY, "-c", RECEIVER, tb.address("depot"), str(TAR_PORT)],
                                  stdout=subprocess.PIPE)
        assert receiver.stdout is not None
        with trio.fail_after(30):
            await receiver.stdout.receive_some(64)
        done = await tb.run("client", [PY, "-c", SENDER, tb.address("depot"), str(TAR_PORT), str(files)])
        await receiver.wait()
        tar = json.loads(done.stdout)
        results["d"] = {"label": "tar | one TCP connection", "mbps": nbytes * 8 / 1e6 / tar["seconds"],
                        "seconds": tar["seconds"], "tar_bytes": tar["bytes"]}
        say(f"    {results['d']['mbps']:.1f} Mbit/s")
    a, b, c = results["a"]["mbps"], results["b"]["mbps"], results["c"]["mbps"]
    results["checks"] = {
        "(a) >= 90% of the link": a >= 0.9 * LINK_MBIT,
        "(a) >= 1.1 x (b)": a >= 1.1 * b,
        "(c) every priority file before the last ordinary one": results["c"]["priority"][
            "priority_after_last_ordinary"] == 0,
        "(c) >= 97% of (a)": c >= 0.97 * a,
    }
    return results


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt-ms", default="50,100", help="round trips to run, comma-separated (50,100)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the seed's 2 x 500 files (1.0)")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--only", default="abcd", help="a subset of the runs, for a quick look (no table)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "lnet-bench-small-files")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(text, flush=True)

    began = time.perf_counter()
    files = args.out / "files"
    say(f"making the file set in {files} (seed {args.seed}, scale {args.scale:g}) ...")
    count, nbytes = make_files(files, args.seed, args.scale)
    say(f"  {count} files, {nbytes / MB:.1f} MB")
    result: dict[str, Any] = {"bench": "small_files", "seed": args.seed, "scale": args.scale, "files": count,
                              "bytes": nbytes, "link_mbit": LINK_MBIT, "rtt": {}}
    for rtt in [float(x) for x in args.rtt_ms.split(",")]:
        result["rtt"][f"{rtt:g}"] = await run_rtt(rtt, files, nbytes, args.out, say, args.only)
    if args.only != "abcd":
        return 0
    print()
    print(f"{count} files ({nbytes / MB:.0f} MB), one {LINK_MBIT:g} Mbit/s link; Mbit/s of file bytes")
    print(f"{'run':<34}" + "".join(f"{f'RTT {k} ms':>22}" for k in result["rtt"]))
    for key, label in (("a", "(a) lnet planner"), ("b", "(b) lnet --pipeline-depth 2"),
                       ("c", "(c) lnet, half priority"), ("d", "(d) tar | one TCP connection")):
        cells = []
        for runs in result["rtt"].values():
            row = runs[key]
            cells.append(f"{row['mbps']:6.1f} ({row['mbps'] / LINK_MBIT:4.0%})"
                         + (f" w{row['wall_mbps']:5.1f}" if "wall_mbps" in row else " " * 7))
        print(f"{label:<34}" + "".join(f"{cell:>22}" for cell in cells))
    for rtt, runs in result["rtt"].items():
        a, b, c = runs["a"]["mbps"], runs["b"]["mbps"], runs["c"]["mbps"]
        p = runs["c"]["priority"]
        print(f"RTT {rtt} ms: (a)/(b) = {a / b:.2f}, (c)/(a) = {c / a:.3f}, last priority file at "
              f"{p['last_priority_s']:.1f} s, last ordinary at {p['last_ordinary_s']:.1f} s")
        for check, ok in runs["checks"].items():
            print(f"  {check}: {'met' if ok else 'MISSED'}")
    result["seconds"] = time.perf_counter() - began
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "small_files.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"(w: the whole command's wall-clock rate) total {result['seconds']:.0f} s; "
          f"written to {results / 'small_files.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
