"""The overlay's shared memory in the simulator: the first transfer of a client with no memory of its own, on an
overlay another client measured, starts from what that client published (through the directory's entry format,
``lnet.directory.memory``, as ``lnet-send`` publishes and adopts it) and runs about as a warm client does."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from lnet.directory.memory import EdgeRecord, encode_memory, memory_key, newest_records, parse_memory
from lnet.scheduler import EdgeEstimate, EdgeMemory, PathScheduler, SchedulerConfig
from lnet.scheduler.scenarios import MIN_STREAMS, STEP_S, STREAMS, scenario
from lnet.scheduler.simulator import SimNetwork, simulate_transfer

PREFIX = "/lnet/"
SEED = 20261129  # not one the scheduler's rules were tuned on
COLD_S = 120.0
RUN_S = 60.0


def shared(memory: EdgeMemory, now: float) -> EdgeMemory:
    """A new client's memory: empty, then every edge the directory's entry of ``memory`` carries."""
    records = [EdgeRecord(u, v, e.throughput_bps, e.measured_at, e.samples, e.failed, e.boost, e.ceiling_bps)
               for (u, v), e in memory.snapshot().items()]
    entry = encode_memory("first", records, now)
    parsed = parse_memory(memory_key(PREFIX, "first"), entry, PREFIX)
    adopted = EdgeMemory()
    for (u, v), r in newest_records([parsed], now).items():
        adopted.adopt(u, v, EdgeEstimate(r.throughput_bps, r.measured_at, r.samples, r.failed, r.boost,
                                         r.ceiling_bps))
    return adopted


def run(network: SimNetwork, src: str, dst: str, memory: EdgeMemory, config: SchedulerConfig, *, start_s: float,
        duration_s: float, seed: int) -> float:
    scheduler = PathScheduler(network.vertices, src, dst, memory, config, rtt_s=network.rtts_from(src))
    result = simulate_transfer(network, scheduler, start_s=start_s, duration_s=duration_s, seed=seed, step_s=STEP_S,
                               depth="adaptive", min_depth=MIN_STREAMS)
    return result.mean_rate(start_s)


@pytest.mark.slow
def test_a_client_with_no_memory_runs_as_a_warm_one_from_the_overlays() -> None:
    config = replace(SchedulerConfig(max_paths=3), streams=STREAMS, min_streams=MIN_STREAMS)  # lnet-send's
    adopted_ratios, cold_ratios = [], []
    for index in range(6, 12):  # the 16-depot class, one scenario of each kind
        case = scenario(SEED, index, cold_s=COLD_S, warm_s=RUN_S)
        assert case.depots == 16
        network = case.network
        first = EdgeMemory()
        run(network, case.src, case.dst, first, config, start_s=0.0, duration_s=COLD_S, seed=index)
        newcomer = shared(first, COLD_S)
        assert set(newcomer) == set(first)  # all of it fits in one entry (at most MAX_EDGES edges)
        again = dict(start_s=COLD_S, duration_s=RUN_S, seed=1000 + index)
        warm = run(network, case.src, case.dst, first, config, **again)  # the first client's next transfer
        adopted = run(network, case.src, case.dst, newcomer, config, **again)
        cold = run(network, case.src, case.dst, EdgeMemory(), config, **again)  # without the directory
        adopted_ratios.append(adopted / warm)
        cold_ratios.append(cold / warm)
    # the target on the testbed is 0.9 of the warm client's rate; a cold start gets less (it explores first)
    assert statistics.median(adopted_ratios) >= 0.9, adopted_ratios
    assert statistics.median(cold_ratios) < statistics.median(adopted_ratios), (cold_ratios, adopted_ratios)
