"""On the testbed: one transfer over two physically disjoint routes (deploy/topologies/multipath2.toml:
src -> dst over its own 16 Mbit/s link, src - a - dst over two 20 Mbit/s links) uses both, and a depot killed on
one of them leaves the other carrying the transfer to the end, the lost blocks re-sent.

The client starts warm from a memory that knows the three edges (what an earlier transfer would have left);
--max-paths 2, 2 blocks in flight per hop. The scheduler starts on the wider route (through a, 19.3 Mbit/s of
payload) and may add the direct one (15.4) at its first judgement, ``min_attempt_s`` (10 s) in, by when about
24 MB have gone through a: the files are sized so that direct then still has most of the file to share in.
What the routes carried is read twice: from lnet-send's --json per-path figures and from the emulated links' own
counters. About 20 and 35 s.

Needs root and network namespaces; elsewhere the tests skip and say so.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.scheduler import EdgeMemory

from .testbed_depots import DepotBed, depots_on, keep, make_payload, tail

pytestmark = pytest.mark.root

TOPOLOGY = Path(__file__).resolve().parents[2] / "deploy" / "topologies" / "multipath2.toml"
MiB = 1024 * 1024
VIA_A = ["src", "a", "dst"]
DIRECT = ["src", "dst"]
# Per stream (2 a hop): each route's link rate halved, in TCP payload.
KNOWN_MBPS = {("src", "a"): 9.6, ("a", "dst"): 9.6, ("src", "dst"): 7.7}


def remembered(tmp: Path) -> Path:
    """An edge memory that knows every edge as the topology runs it (so the mismatch rule keeps it)."""
    memory = EdgeMemory()
    now = time.time()  # the memory is in Unix time, as lnet-send's clock
    for (u, v), mbps in KNOWN_MBPS.items():
        memory.observe(u, v, int(mbps * 1e6 / 8 * 5), 5.0, now)
    path = tmp / "edges.json"
    memory.save(path)
    return path


def carried(summary: dict[str, Any]) -> dict[tuple[str, ...], int]:
    """Bytes each path delivered, by lnet-send's --json per-path figures (``path_shares``)."""
    return {tuple(entry["path"]): int(entry["bytes"]) for entry in summary["path_shares"]}


async def finish(bed: DepotBed, sender: trio.Process, log: Path, timeout_s: float) -> dict[str, Any]:
    output = b""
    assert sender.stdout is not None
    with trio.fail_after(timeout_s):
        async for chunk in sender.stdout:
            output += chunk
        await sender.wait()
    assert sender.returncode == 0, tail(log)
    keep(log.with_name("summary.json"), output)
    summary: dict[str, Any] = json.loads(output)
    return summary


async def test_two_disjoint_routes_both_carry_the_transfer(requires_root: None, bed_name: str,
                                                           tmp_path: Path) -> None:
    size = 64 * MiB
    payload, digest = make_payload(tmp_path, size)
    async with depots_on(TOPOLOGY, bed_name, tmp_path, "src") as bed:
        argv = bed.send_argv(payload, "dst", remembered(tmp_path), "--max-paths", "2", "--max-inflight", "2")
        with (tmp_path / "send.log").open("wb") as log:
            sender = await bed.tb.spawn("src", argv, stdout=subprocess.PIPE, stderr=log)
        summary = await finish(bed, sender, tmp_path / "send.log", 90)
        shares = carried(summary)
        # Alone for the first 10 s, then shared by rate (19.3 : 15.4 Mbit/s, 56% : 44%), direct should carry
        # about 28% of the file; a sixth is well under that and well over what a path that joined only for the
        # last blocks, or was given blocks without regard to its rate, would carry.
        assert shares.get(tuple(VIA_A), 0) > size / 2, shares
        assert shares.get(tuple(DIRECT), 0) > size / 6, shares
        assert sum(shares.values()) == size, shares
        links = await bed.link_bytes()  # what really crossed each route's last link (headers included)
        assert links[("a", "dst")] > size / 2, links
        assert links[("src", "dst")] > size / 6, links
        assert json.loads((tmp_path / "manifest.json").read_text())["file_hash"] == digest
        assert await bed.fetch("dst") == digest


async def test_a_depot_killed_on_one_route_leaves_the_other_carrying_on(requires_root: None, bed_name: str,
                                                                        tmp_path: Path) -> None:
    size = 64 * MiB
    payload, digest = make_payload(tmp_path, size)
    async with depots_on(TOPOLOGY, bed_name, tmp_path, "src") as bed:
        argv = bed.send_argv(payload, "dst", remembered(tmp_path), "--max-paths", "2", "--max-inflight", "2",
                             "--timeout", "5s")
        with (tmp_path / "send.log").open("wb") as log:
            sender = await bed.tb.spawn("src", argv, stdout=subprocess.PIPE, stderr=log)
        # Mid transfer for real: blocks going down both routes, seen on each route's last link.
        await bed.wait_for_link("src", "dst", at_least=2 * MiB, timeout_s=60)
        via_a = (await bed.link_bytes())[("a", "dst")]
        assert sender.returncode is None, "the transfer ended before the depot could be killed"
        assert via_a < 0.6 * size, f"{via_a} bytes already through a: too little left for direct to carry on"
        bed.depots["a"].kill()  # kill -9: every block held at a is lost
        summary = await finish(bed, sender, tmp_path / "send.log", 120)
        assert summary["resends"] > 0  # the blocks a held went again, from the source
        assert summary["paths"] == [DIRECT]  # direct carried on to the end, and the dead route is no longer listed
        shares = carried(summary)
        assert shares.get(tuple(DIRECT), 0) > size - via_a, shares  # all the rest, and more: what a lost
        assert sum(shares.values()) == size, shares
        assert json.loads((tmp_path / "manifest.json").read_text())["file_hash"] == digest
        assert await bed.fetch("dst") == digest
