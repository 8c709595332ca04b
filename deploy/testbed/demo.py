"""``lnet demo``: the seed's experiment on the emulated Abilene testbed, end to end, in a few minutes.

Brings up ``deploy/topologies/abilene.toml``, starts a depot on every host but ORNL, and sends one file from
ORNL to Sunnyvale three ways with the same block size and in-flight settings: pinned to the direct path, a cold
start (nothing known), and a warm start (what the cold start learnt). Then it fetches the file at Sunnyvale with
``lnet-get`` and checks it, prints the comparison and the cold start's path attempts (the seed's Table 1), and
plots throughput over time (the seed's Figure 1) when matplotlib is installed.

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

__all__ = ["DemoResult", "run_demo"]

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


async def _start_depot(tb: Testbed, host: str, data_dir: Path) -> trio.Process:
    argv = _python("lnet.depot.cli", "--listen", f"{tb.address(host)}:{PORT}", "--name", host,
                   "--data-dir", str(data_dir / host), "--capacity", "2GiB", "--max-allocation", "64MiB",
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
                "--json", *extra,
            )
            done = await tb.run(SOURCE, argv, check=False)
            if done.returncode != 0:
                say(f"  lnet-send failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
                return done.returncode
            summary = json.loads(done.stdout)
            results.append(DemoResult(name, summary))
            say(f"  {summary['seconds']:.1f} s, {summary['mbps']:.2f} Mbit/s over {' -> '.join(summary['path'])}")
        fetched = out / "received.bin"
        got = await tb.run(
            DESTINATION,
            _python("lnet.client.get", str(out / "warm.manifest.json"), "-o", str(fetched), "--no-progress"),
            check=False,
        )
        received_ok = got.returncode == 0 and _sha256(fetched) == digest
        say(f"- lnet-get at {DESTINATION}: {'identical bytes' if received_ok else 'FAILED'}")
    direct = results[0].summary["mbps"]
    say("")
    say(f"{'run':<8} {'seconds':>8} {'Mbit/s':>8} {'x direct':>9}  path")
    for result in results:
        s = result.summary
        say(f"{result.name:<8} {s['seconds']:>8.1f} {s['mbps']:>8.2f} {s['mbps'] / direct:>9.2f}  "
            f"{' -> '.join(s['path'])}")
    say("")
    reports = [str(out / f"{r.name}.json") for r in results]
    shown = await trio.run_process(
        _python("lnet.client.cli", "report", *reports, "--plot", str(out / "demo.png")),
        check=False, capture_stdout=True, capture_stderr=True,
    )
    say(shown.stdout.decode().rstrip())
    if shown.returncode != 0:  # most likely no matplotlib: the tables still print
        say(shown.stderr.decode().strip())
        tables = await trio.run_process(_python("lnet.client.cli", "report", *reports), check=False,
                                        capture_stdout=True)
        say(tables.stdout.decode().rstrip())
    say(f"files: {out}/ (reports {', '.join(Path(r).name for r in reports)}, manifests, edges.json)")
    return 0 if received_ok else 4
