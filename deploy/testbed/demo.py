"""``lnet demo``: the seed's experiment on the emulated Abilene testbed, end to end, in a few minutes.

Brings up ``deploy/topologies/abilene.toml``, starts a depot on every host but ORNL, and sends one file from
ORNL to Sunnyvale three ways with the same block size and in-flight settings: pinned to the direct path, a cold
start (nothing known), and a warm start (what the cold start learnt); each run's ``--trace`` is kept beside
its report. Then it fetches the file at Sunnyvale with
``lnet-get`` and checks it, and prints the comparison: for each run every path it used with the time on each,
its Mbit/s and its ratio to the pinned direct run; the cold start's path attempts and measured edges (the
seed's Tables 1 and 2); a plot of throughput over time (the seed's Figure 1) when matplotlib is installed; and
last, one line with the warm start's ratio to the direct run.

It drives the real programs (``lnet-depot``, ``lnet-send``, ``lnet-get``, ``lnet report``) in the hosts'
network namespaces, exactly as a person would; it imports none of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from .netns import TestbedError, check_privileges
from .testbed import Testbed

__all__ = ["DemoResult", "comparison", "run_demo", "verdict"]

TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "abilene.toml"
SOURCE, DESTINATION = "ornl", "svl"
PORT = 6714
STARTUP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DemoResult:
    name: str
    summary: dict[str, Any]


def _python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


async def _start_depot(
    tb: Testbed, host: str, data_dir: Path, *, capacity: str = "2GiB", max_allocation: str = "64MiB"
) -> trio.Process:
    """A depot on ``host`` at the demo's port, its data under ``data_dir / host``; returns once it serves."""
    argv = _python("lnet.depot.cli", "--listen", f"{tb.address(host)}:{PORT}", "--name", host,
                   "--data-dir", str(data_dir / host), "--capacity", capacity, "--max-allocation", max_allocation,
                   "--log-level", "warning")
    process = await tb.spawn(host, argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(STARTUP_TIMEOUT_S):
        while b"serving on" not in seen:
            chunk = await process.stderr.receive_some(4096)
            if not chunk:
                raise TestbedError(f"the depot on {host} exited: {seen.decode(errors='replace')}")
            seen += chunk
    return process


def _prepare(out: Path, size: int) -> tuple[Path, str]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "edges.json").unlink(missing_ok=True)  # the cold start must really be cold, the warm one its heir
    payload = out / "payload.bin"
    payload.write_bytes(os.urandom(size))
    return payload, _sha256(payload)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_depots_file(tb: Testbed, path: Path, here: str) -> None:
    lines = [f'here = "{here}"']
    for host in tb.hosts:
        if host != here:
            lines += [f"[depots.{host}]", f'url = "http://{tb.address(host)}:{PORT}"']
    path.write_text("\n".join(lines) + "\n")


async def run_demo(out: Path, *, size: int, block: str, max_inflight: int, say: Any = print) -> int:
    """Run the demo, writing its files under ``out``; returns an exit status (0: every check held)."""
    check_privileges()
    payload, digest = _prepare(out, size)
    depots_file, memory = out / "depots.toml", out / "edges.json"
    runs = [
        ("direct", ["--path", DESTINATION], "pinned to the direct path ORNL -> Sunnyvale"),
        ("cold", ["--cold"], "cold start: nothing known, the scheduler explores"),
        ("warm", [], "warm start: from what the cold start learnt"),
    ]
    results: list[DemoResult] = []
    say(f"bringing up the abilene testbed ({TOPOLOGY}) ...")
    async with Testbed(TOPOLOGY, name="lnet-demo") as tb:
        for host in tb.hosts:
            if host != SOURCE:
                await _start_depot(tb, host, out / "depots")
        write_depots_file(tb, depots_file, SOURCE)
        say(f"depots on {', '.join(h for h in tb.hosts if h != SOURCE)}; sending {size / 2**20:.0f} MiB "
            f"from {SOURCE} to {DESTINATION} in {block} blocks, at most {max_inflight} per hop at once")
        for name, extra, what in runs:
            say(f"- {name}: {what}")
            argv = _python(
                "lnet.client.send", str(payload), "--to", DESTINATION, "--depots", str(depots_file),
                "--memory", str(memory), "--block-size", block, "--max-inflight", str(max_inflight),
                "--report", str(out / f"{name}.json"), "--manifest", str(out / f"{name}.manifest.json"),
                "--trace", str(out / f"{name}.trace.jsonl"), "--json", *extra,
            )
            done = await tb.run(SOURCE, argv, check=False)
            if done.returncode != 0:
                say(f"  lnet-send failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
                return done.returncode
            summary = json.loads(done.stdout)
            results.append(DemoResult(name, summary))
            changes = max(0, len(summary.get("path_attempts", [])) - 1)
            say(f"  {summary['seconds']:.1f} s, {summary['mbps']:.2f} Mbit/s, ended on {' -> '.join(summary['path'])}"
                f" ({changes} path change{'' if changes == 1 else 's'})")
        fetched = out / "received.bin"
        got = await tb.run(
            DESTINATION,
            _python("lnet.client.get", str(out / "warm.manifest.json"), "-o", str(fetched), "--no-progress"),
            check=False,
        )
        received_ok = got.returncode == 0 and _sha256(fetched) == digest
        say(f"- lnet-get at {DESTINATION}: {'identical bytes' if received_ok else 'FAILED'}")
    say("")
    for line in comparison(results):
        say(line)
    say("")
    reports = {r.name: str(out / f"{r.name}.json") for r in results}
    tables = await trio.run_process(_python("lnet.client.cli", "report", reports["cold"]), check=False,
                                    capture_stdout=True, capture_stderr=True)
    say("the cold start in detail (the seed's Tables 1 and 2):")
    say(tables.stdout.decode().rstrip())
    plotted = await trio.run_process(
        _python("lnet.client.cli", "report", *reports.values(), "--plot", str(out / "demo.png")),
        check=False, capture_stdout=True, capture_stderr=True,
    )
    if plotted.returncode == 0:  # its tables were shown above for the run that matters
        say(plotted.stdout.decode().strip().splitlines()[-1])
    else:  # most likely no matplotlib
        say(plotted.stderr.decode().strip())
    say(f"files: {out}/ (reports {', '.join(Path(r).name for r in reports.values())}, manifests, edges.json; "
        "why each run chose its paths: NAME.trace.jsonl, see docs/client.md on --trace)")
    say("")
    say(verdict(results))
    return 0 if received_ok else 4


def _path_runs(summary: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Every path a run used, in order, as (path, seconds on it, Mbit/s delivered meanwhile)."""
    runs = []
    for attempt in summary.get("path_attempts", []):
        seconds = float(attempt["end"]) - float(attempt["start"])
        runs.append((" -> ".join(attempt["path"]), seconds, float(attempt["mbps"])))
    if not runs:  # a summary without attempts: the final path, the whole time
        runs.append((" -> ".join(summary["path"]), float(summary["seconds"]), float(summary["mbps"])))
    return runs


def comparison(results: list[DemoResult]) -> list[str]:
    """The runs side by side: seconds, Mbit/s and the ratio to the first (the pinned direct run), and beside each
    every path it used, in order, with its time and the Mbit/s delivered meanwhile."""
    direct = float(results[0].summary["mbps"])
    paths = {result.name: _path_runs(result.summary) for result in results}
    width = max(len(path) for runs in paths.values() for path, _, _ in runs)
    lines = [f"{'run':<8} {'seconds':>8} {'Mbit/s':>8} {'x direct':>9}   {'paths used, in order':<{width}}  "
             f"{'time':>8} {'Mbit/s':>7}"]
    for result in results:
        s = result.summary
        ratio = float(s["mbps"]) / direct if direct > 0 else float("inf")
        head = f"{result.name:<8} {s['seconds']:>8.1f} {s['mbps']:>8.2f} {ratio:>9.2f}"
        for path, seconds, mbps in paths[result.name]:
            lines.append(f"{head}   {path:<{width}}  {seconds:6.1f} s {mbps:7.2f}")
            head = " " * len(head)
    return lines


def verdict(results: list[DemoResult]) -> str:
    """One line: the warm start against the pinned direct run."""
    by_name = {r.name: r.summary for r in results}
    direct, warm = float(by_name["direct"]["mbps"]), float(by_name["warm"]["mbps"])
    ratio = warm / direct if direct > 0 else float("inf")
    return (f"warm start / pinned direct = {ratio:.2f} ({warm:.2f} against {direct:.2f} Mbit/s; the warm start "
            f"ended on {' -> '.join(by_name['warm']['path'])})")
