"""A receiver that drains the destination as blocks land (`--follow`) against a send into a destination that holds
the whole file: does the receiver slow the transfer down?

    ./run bench follow [--size 1GiB] [--runs 3] [--skip-loopback] [--skip-testbed] [--testbed-size 96MiB]

Loopback (real `lnet-depot` processes, no emulation): relays a and b of 256 MiB, lnet-send pinned through them
(`--path a,b`), 4 MiB blocks.
  alone:  lnet-send FILE --to big          (big holds every run's file: capacity (runs + 1) x size)
  follow: lnet-send FILE --to small --follow, and lnet-get URL --follow started as soon as the sender prints URL
          (small: 256 MiB, a quarter of the file at 1 GiB)
Emulated Abilene (needs root; the demo's settings: 96 MiB from ORNL to Sunnyvale, 1 MiB blocks, 2 per hop, a
warm start from one cold run's edge memory, the same memory for every run): the same two, with the receiver on
Sunnyvale; Sunnyvale's depot is started afresh for each run at the same address, holding 2 GiB alone and 32 MiB
with --follow.

Every run's time is wall clock from lnet-send's start to the last process's exit (the receiver's, with
--follow), start-up included; the runs alternate alone / follow. Prints each run, then the medians with their
spread and the ratio alone / follow (the target: at least 0.8 on loopback, at least 0.9 on Abilene), and writes
one JSON document to bench/results/follow-<time>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.testbed import Testbed  # noqa: E402
from lnet.testbed.demo import DESTINATION, SOURCE, TOPOLOGY, _start_depot, write_depots_file  # noqa: E402
from lnet.units import format_size, parse_size  # noqa: E402
from tests.client.loopback import loopback_depots  # noqa: E402

PY = sys.executable
Spawn = Callable[..., Awaitable[trio.Process]]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def depots_file(path: Path, here: str, urls: dict[str, str]) -> Path:
    lines = [f'here = "{here}"'] + [f'[depots.{name}]\nurl = "{url}"' for name, url in urls.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


async def _drain(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.receive_some(65536):
        into += chunk


async def timed_send(spawn_send: Spawn, send_argv: list[str], spawn_get: Spawn | None,
                     get_argv: Callable[[str], list[str]] | None) -> dict[str, Any]:
    """Run lnet-send (and, once it prints the receiver's command, lnet-get): seconds from the sender's start to
    the last exit, each one's own exit code and output."""
    started = time.perf_counter()
    sender = await spawn_send(send_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, got_out, got_err = bytearray(), bytearray(), bytearray(), bytearray()
    receiver: trio.Process | None = None
    url = ""
    assert sender.stderr is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, sender.stdout, out)
        while b"at the far end: lnet-get " not in err or not err.endswith(b"\n"):
            chunk = await sender.stderr.receive_some(65536)
            if not chunk:
                break
            err += chunk
        for line in err.decode(errors="replace").splitlines():
            if line.startswith("at the far end: lnet-get "):
                url = line.split()[5]
        if url and spawn_get is not None and get_argv is not None:
            receiver = await spawn_get(get_argv(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            nursery.start_soon(_drain, receiver.stdout, got_out)
            nursery.start_soon(_drain, receiver.stderr, got_err)
        nursery.start_soon(_drain, sender.stderr, err)
        await sender.wait()
        if receiver is not None:
            await receiver.wait()
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {"seconds": seconds, "send_exit": sender.returncode,
                              "send_seconds": json.loads(out)["seconds"] if sender.returncode == 0 else None}
    if sender.returncode != 0:
        result["send_error"] = err.decode(errors="replace")[-2000:]
    if receiver is not None:
        result["get_exit"] = receiver.returncode
        if receiver.returncode != 0:
            result["get_error"] = got_err.decode(errors="replace")[-2000:]
    return result


async def alternate(
    name: str, runs: int, argv: Callable[[str, int], list[str]], before: Callable[[str], Awaitable[None]],
    spawn_send: Spawn, spawn_get: Spawn, tmp: Path, digest: str, say: Callable[[str], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``runs`` pairs, alone then --follow (with the receiver): each run's figures, and whether the received file
    is the one sent."""
    alone: list[dict[str, Any]] = []
    follow: list[dict[str, Any]] = []
    for run in range(runs):
        for mode in ("alone", "follow"):
            await before(mode)
            out = tmp / f"received-{run}.bin"
            command = argv(mode, run) + (["--follow"] if mode == "follow" else [])

            def receiver(url: str, out: Path = out) -> list[str]:
                return [PY, "-m", "lnet.client.get", url, "-o", str(out), "--follow", "--no-progress", "--json"]

            if mode == "alone":
                result = await timed_send(spawn_send, command, None, None)
                alone.append(result)
            else:
                result = await timed_send(spawn_send, command, spawn_get, receiver)
                result["identical"] = out.exists() and sha256(out) == digest
                out.unlink(missing_ok=True)
                follow.append(result)
            say(f"  {name} {mode} run {run + 1}: {result['seconds']:.2f} s"
                + (f" (identical: {result['identical']})" if mode == "follow" else "")
                + ("" if result["send_exit"] == 0 else f" lnet-send exit {result['send_exit']}")
                + (f" lnet-get exit {result['get_exit']}" if result.get("get_exit") else ""))
    return alone, follow


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(name: str, alone: list[dict[str, Any]], follow: list[dict[str, Any]], target: float,
              say: Callable[[str], None]) -> dict[str, Any]:
    ok_alone = [r["seconds"] for r in alone if r["send_exit"] == 0]
    ok_follow = [r["seconds"] for r in follow if r["send_exit"] == 0 and r.get("get_exit") == 0 and r["identical"]]
    summary: dict[str, Any] = {"alone_s": alone, "follow_s": follow, "target": target}
    if not ok_alone or not ok_follow:
        say(f"{name}: a run failed; see the JSON")
        summary["ratio"] = None
        return summary
    a, f = spread(ok_alone), spread(ok_follow)
    ratio = a["median"] / f["median"]
    summary.update(alone=a, follow=f, ratio=ratio, met=ratio >= target)
    say(f"{name}: alone {a['median']:.2f} s ({a['min']:.2f}-{a['max']:.2f}), follow end to end {f['median']:.2f} s "
        f"({f['min']:.2f}-{f['max']:.2f}) over {len(ok_follow)} runs: alone / follow = {ratio:.2f} "
        f"(target >= {target}: {'met' if ratio >= target else 'MISSED'})")
    return summary


async def loopback(size: int, runs: int, say: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        payload = tmp / "payload.bin"
        with payload.open("wb") as f:
            for _ in range(0, size, 64 << 20):
                f.write(os.urandom(min(64 << 20, size - f.tell())))
        digest = sha256(payload)
        common = ["--max-allocation", "64MiB", "--log-level", "warning"]
        with loopback_depots(["a", "b", "small"], tmp, "--capacity", "256MiB", *common) as relays, \
                loopback_depots(["big"], tmp, "--capacity", str((runs + 1) * size), *common) as big:
            urls = {name: depot.url for name, depot in {**relays, **big}.items()}
            config = depots_file(tmp / "depots.toml", "me", urls)

            async def spawn(argv: list[str], **kwargs: Any) -> trio.Process:
                return await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, **kwargs)

            def argv(mode: str, run: int) -> list[str]:
                return [PY, "-m", "lnet.client.send", str(payload), "--to", "big" if mode == "alone" else "small",
                        "--depots", str(config), "--path", "a,b", "--memory", str(tmp / "edges.json"), "--json",
                        "--no-progress", "--manifest", str(tmp / f"{mode}-{run}.manifest.json")]

            async def nothing(mode: str) -> None:
                return None

            alone, follow = await alternate("loopback", runs, argv, nothing, spawn, spawn, tmp, digest, say)
    return summarize(f"loopback, {format_size(size)} through a, b (256 MiB each)", alone, follow, 0.8, say)


async def testbed(size: int, runs: int, say: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        payload = tmp / "payload.bin"
        payload.write_bytes(os.urandom(size))
        digest = sha256(payload)
        async with Testbed(TOPOLOGY, name="lnet-follow") as tb:
            for host in tb.hosts:
                if host not in (SOURCE, DESTINATION):
                    await _start_depot(tb, host, tmp / "data")
            write_depots_file(tb, tmp / "depots.toml", SOURCE)
            base = ["--to", DESTINATION, "--block-size", "1MiB", "--max-inflight", "2", "--json", "--no-progress",
                    "--depots", str(tmp / "depots.toml")]
            memory = tmp / "edges.json"
            # The destination's depot is started afresh for every run, at the same address: 2 GiB alone, 32 MiB
            # with --follow (its peers' weather names it by that address either way).
            destination: list[trio.Process] = []

            async def fresh_destination(capacity: str) -> None:
                for process in destination:
                    process.kill()
                    await process.wait()
                shutil.rmtree(tmp / "data" / DESTINATION, ignore_errors=True)
                destination[:] = [await _start_depot(tb, DESTINATION, tmp / "data", capacity=capacity,
                                                   max_allocation="16MiB")]

            say("  testbed: one cold start to learn the edges (not counted)")
            await fresh_destination("2GiB")
            await tb.run(SOURCE, [PY, "-m", "lnet.client.send", str(payload), "--memory", str(memory), "--cold",
                                  *base, "--manifest", str(tmp / "cold.json")])

            async def on(host: str) -> Spawn:
                async def spawn(argv: list[str], **kwargs: Any) -> trio.Process:
                    return await tb.spawn(host, argv, stdin=subprocess.DEVNULL, **kwargs)
                return spawn

            def argv(mode: str, run: int) -> list[str]:
                warm = tmp / f"edges-{mode}-{run}.json"
                shutil.copy(memory, warm)  # every run starts from the same memory
                return [PY, "-m", "lnet.client.send", str(payload), "--memory", str(warm), *base,
                        "--manifest", str(tmp / f"{mode}-{run}.manifest.json")]

            async def before(mode: str) -> None:
                await fresh_destination("2GiB" if mode == "alone" else "32MiB")

            alone, follow = await alternate("testbed", runs, argv, before, await on(SOURCE), await on(DESTINATION),
                                            tmp, digest, say)
    return summarize(f"abilene, {format_size(size)} ORNL -> Sunnyvale (32 MiB there with --follow)", alone, follow,
                     0.9, say)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1GiB", help="the loopback file (1GiB)")
    parser.add_argument("--testbed-size", default="96MiB", help="the Abilene file (96MiB, the demo's)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (3)")
    parser.add_argument("--skip-loopback", action="store_true")
    parser.add_argument("--skip-testbed", action="store_true")
    args = parser.parse_args(argv)
    command = "./run bench follow " + " ".join(argv if argv is not None else sys.argv[1:])
    say = print
    say(f"{command.strip()} ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)")
    commit = await trio.run_process(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_stdout=True)
    results: dict[str, Any] = {"command": command.strip(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "commit": commit.stdout.decode().strip()}
    if not args.skip_loopback:
        results["loopback"] = await loopback(parse_size(args.size), args.runs, say)
    if not args.skip_testbed:
        if os.geteuid() != 0:
            say("the Abilene part needs root (network namespaces): skipped")
        else:
            results["testbed"] = await testbed(parse_size(args.testbed_size), args.runs, say)
    out = REPO / "bench" / "results" / f"follow-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    say(f"results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
