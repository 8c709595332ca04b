"""One seeded random scenario on the testbed: the simulator's scenario generator's network, scaled as
the benchmarks scale it (``bench/pathchoice.py --random``), carries lnet-send's cold start and then its warm start
with lnet-send's defaults, and the file lnet-get rebuilds at the destination is the file sent, both times.

Scenario 9/1 is a detour of four depots (scaled by 0.76): a three-hop chain the simulator runs at about 45
Mbit/s, the direct path at 15. 8 MiB each way; the whole test takes about a minute. Root only; it takes the
testbed lock (/tmp/lnet-testbed.lock) that the benchmarks take, so that it never shares the machine with one.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.scheduler import EdgeMemory
from lnet.scheduler.scenarios import emulation_scale, scenario, topology_of
from lnet.testbed import Topology

from ..client.testbed_depots import depots_on, make_payload, tail

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("requires_root")]

SEED, INDEX = 9, 1
SIZE = 8 * 1024 * 1024
LOCK = Path("/tmp/lnet-testbed.lock")
LOCK_WAIT_S = 20 * 60.0
SEND_TIMEOUT_S = 60.0


@pytest.fixture
def testbed_lock(requires_root: None) -> Iterator[None]:
    """The testbed to ourselves: the lock every testbed benchmark takes (``flock /tmp/lnet-testbed.lock``); after
    the root check, so that elsewhere the test skips and says why."""
    with LOCK.open("a") as handle:
        waited = 0.0
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waited >= LOCK_WAIT_S:
                    pytest.fail(f"{LOCK} stayed locked for {LOCK_WAIT_S:.0f} s: another testbed run holds it")
                time.sleep(1.0)
                waited += 1.0
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def scaled_topology() -> Topology:
    case = scenario(SEED, INDEX)
    physical = case.physical.static()
    return Topology.from_dict(topology_of(physical.scaled(emulation_scale(physical)), "random"))


async def send(bed: Any, payload: Path, memory: Path, log: Path, *extra: str) -> dict[str, Any]:
    argv = bed.send_argv(payload, "dst", memory, *extra)
    with trio.fail_after(SEND_TIMEOUT_S), log.open("wb") as err:
        done = await bed.tb.run("src", argv, check=False, capture_stderr=False, stderr=err)
    assert done.returncode == 0, tail(log)
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


@pytest.mark.usefixtures("testbed_lock")
async def test_a_random_scenario_carries_a_cold_then_a_warm_transfer_intact(bed_name: str, tmp_path: Path) -> None:
    topology = scaled_topology()
    assert scenario(SEED, INDEX).kind == "detour"
    payload, digest = make_payload(tmp_path, SIZE)
    memory = tmp_path / "edges.json"
    async with depots_on(topology, bed_name, tmp_path, "src") as bed:
        cold = await send(bed, payload, memory, tmp_path / "cold.log", "--cold")
        assert sum(share["bytes"] for share in cold["path_shares"]) == SIZE, cold["path_shares"]
        assert json.loads((tmp_path / "manifest.json").read_text())["file_hash"] == digest
        assert await bed.fetch("dst") == digest
        learnt = EdgeMemory.load(memory)  # what the warm run starts from
        assert len(learnt) > 0, "the cold run left nothing in its memory"
        warm = await send(bed, payload, memory, tmp_path / "warm.log")
        assert sum(share["bytes"] for share in warm["path_shares"]) == SIZE, warm["path_shares"]
        assert json.loads((tmp_path / "manifest.json").read_text())["file_hash"] == digest
        assert await bed.fetch("dst") == digest
    print(f"scenario {SEED}/{INDEX}: cold {cold['mbps']:.1f} Mbit/s over {cold['paths']}, warm {warm['mbps']:.1f} "
          f"over {warm['paths']}")
