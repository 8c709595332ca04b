"""bench/replay.py: a run's trace, fed again to the scheduler, gives the decisions the run took."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.client.sending.relay import Relay, RelayConfig, Traced
from lnet.protocol.clock import TrioWallClock
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig

from ..client.network import MiB, Network, depots, inline
from .benches import load_bench

rp = load_bench("replay")

# A wide route through a, a narrower one through b, a slow direct link, and c, a depot the round trips make look
# good whose onward edge is slow: the cold start runs direct, scouts, probes, moves and joins paths.
RATES = {("here", "a"): 12 * MiB, ("a", "dst"): 12 * MiB, ("here", "b"): 6 * MiB, ("b", "dst"): 6 * MiB,
         ("here", "c"): 12 * MiB, ("c", "dst"): 1 * MiB}
RTT_S = {"a": 0.02, "b": 0.02, "c": 0.01, "dst": 0.03}


async def traced_run(tmp_path: Path, memory: EdgeMemory) -> list[dict[str, Any]]:
    """A transfer on the emulated network with lnet-send's scheduler, as ``--trace`` writes its records."""
    network = Network(default_rate=0.5 * MiB, latency_s=0.01)
    for (u, v), rate in RATES.items():
        network.set_rate(u, v, rate)
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(120 * MiB))
    config = SchedulerConfig(max_paths=3, streams=RelayConfig().max_inflight, min_streams=2, block_bytes=MiB,
                             first_depth=RelayConfig().initial_inflight)  # as lnet-send sets it
    records: list[dict[str, Any]] = []

    def keep(event: object) -> None:
        if isinstance(event, Traced):
            records.append(json.loads(json.dumps({"kind": event.kind, **event.data})))  # as the file holds it

    async with depots(network, ["a", "b", "c", "dst"], tmp_path) as clients:
        scheduler = PathScheduler(["here", "a", "b", "c", "dst"], "here", "dst", memory, config, rtt_s=RTT_S)
        relay = Relay(source, "here", "dst", clients, scheduler=scheduler,
                      config=RelayConfig(block_size=MiB, trace=True), offload=inline, on_event=keep)
        await relay.run()
    return records


async def test_a_cold_start_replays_to_the_decisions_it_took(
    tmp_path: Path, autojump_clock: trio.abc.Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    records = await traced_run(tmp_path, EdgeMemory())
    decisions = [r for r in records if r["kind"] == "decision"]
    assert decisions[0]["left_bytes"] == 120 * MiB  # what the fill rule weighed, replayed as Progress
    assert all(d["left_bytes"] <= 120 * MiB for d in decisions)
    assert decisions[-1]["left_bytes"] < decisions[0]["left_bytes"]
    steps = rp.replay(records)
    # Told that next to nothing was left, the scheduler would have joined no path after its start; replayed
    # without the bytes left (--no-fill-rule), the figures recorded make no difference.
    starved = [{**r, "left_bytes": 1} if r["kind"] == "decision" and r is not decisions[0] else r for r in records]
    assert not all(step.same for step in rp.replay(starved))
    assert [step.replayed for step in rp.replay(starved, fill_rule=False)] == [
        step.replayed for step in rp.replay(records, fill_rule=False)
    ]
    kinds = {(step.recorded[0], step.recorded[1]) for step in steps}
    assert ("Switch", "start") in kinds
    assert ("Switch", "join") in kinds  # it did more than start
    assert any(step.recorded[3] for step in steps)  # and asked for probes
    assert all(step.same for step in steps), next(step for step in steps if not step.same)
    trace = tmp_path / "run.trace.jsonl"
    trace.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert rp.main([str(trace)]) == 0
    assert f"{len(steps)} decisions: all the same" in capsys.readouterr().out

    # A run whose scheduler decided otherwise at one point (here: a probe it did not ask for) differs there
    changed = next(i for i, r in enumerate(records) if r["kind"] == "decision" and r["probes"] and i > 0)
    records[changed] = {**records[changed], "probes": [["here", "nowhere"]]}
    trace.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert rp.main([str(trace)]) == 1
    out = capsys.readouterr().out
    number = sum(1 for r in records[: changed + 1] if r["kind"] == "decision")
    assert f"the first that differs is number {number}, at {records[changed]['t']:.3f} s" in out
    assert "replayed" in out
    assert "here>nowhere" in out


async def test_a_warm_start_replays_from_the_memory_it_began_with(
    tmp_path: Path, autojump_clock: trio.abc.Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # remembered: the route through a at its rate, b's first edge, and c's slow onward edge, an hour ago (aged
    # since: the memory's records are dated on the run's clock, and the replay must date the events alike)
    memory = EdgeMemory()
    now = TrioWallClock()()
    memory.observe("here", "a", 12 * MiB, 1.0, now - 3600)
    memory.observe("a", "dst", 12 * MiB, 1.0, now - 3600)
    memory.observe("here", "b", 6 * MiB, 1.0, now - 60)
    memory.observe("c", "dst", 1 * MiB, 1.0, now - 60)
    records = await traced_run(tmp_path, memory)
    assert records[0]["remembered_edges"] == 4
    steps = rp.replay(records)
    assert ["here", "a", "dst"] in steps[0].recorded[2]  # a warm start: the remembered route from the first second
    assert all(step.same for step in steps), next(step for step in steps if not step.same)
    # the same run replayed from no memory starts elsewhere: the memory is what the replay began from
    cold = {**records[0], "memory": EdgeMemory().document(), "remembered_edges": 0}
    assert not rp.replay([cold, *records[1:]])[0].same


def test_a_trace_without_the_start_s_settings_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = {"kind": "decision", "t": 0.0, "decision": "Switch", "reason": "start", "paths": [["here", "dst"]],
             "probes": [], "deep": [], "rtt_ms": {}, "peer_rtt_ms": {}}
    trace = tmp_path / "old.trace.jsonl"
    trace.write_text(json.dumps(start) + "\n")
    assert rp.main([str(trace)]) == 2
    err = capsys.readouterr().err
    assert "has no src, dst, vertices, config, clock_s, memory, memory_smoothing_s" in err
    assert "a trace of an earlier lnet-send" in err
    trace.write_text(json.dumps({**start, "reason": "pinned"}) + "\n")
    assert rp.main([str(trace)]) == 2
    assert "no start decision" in capsys.readouterr().err
