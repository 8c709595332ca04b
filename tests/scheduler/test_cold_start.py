"""Issue 11's cold start on the emulated Abilene: how soon the transfer runs at 90% of the best chain.

On the testbed a cold start reached 90% of the oracle in 35.6 s (target 30). ``abilene_shared()`` shows why in
simulated time (the simulator is its own clock, stepped every 0.5 s; no wall time passes): every optimistic path
ties at the round-trip guess for Denver -> Sunnyvale, the fewest-hops rule sent the probes to shortcuts and to
depots off to the side, and the four-depot chain's middle edges were measured only after the first decision, so
the transfer took two detours (at 10 s and 20 s) before the chain (at 30 s). Probing the surest of the tied paths
(``RISKY_GUESS``) measures the whole chain before the first decision.
"""

from __future__ import annotations

import pytest

from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig, Switch, edges_of
from lnet.scheduler.simulator import SimResult, abilene_shared, mbit, simulate_transfer

CHAIN = ("ornl", "atl", "ind", "kc", "den", "svl")
STREAMS = 2
"""The relay's blocks in flight per hop at ``--max-inflight 2``, the benchmark's and the demo's setting."""


def cold_start(seed: int) -> SimResult:
    network = abilene_shared()
    config = SchedulerConfig(streams=STREAMS)  # everything else as lnet-send has it: 4 probes of 4 s, 10 s attempts
    scheduler = PathScheduler(
        network.vertices, "ornl", "svl", EdgeMemory(), config, rtt_s=network.rtts_from("ornl")
    )
    return simulate_transfer(network, scheduler, duration_s=60.0, seed=seed)


def test_the_chain_is_the_best_path_at_two_streams_a_hop() -> None:
    network = abilene_shared(noise=0.0)
    chain = min(network.share(dict.fromkeys(edges_of(CHAIN), STREAMS), 0.0).values())
    skipping_atlanta = min(network.share(dict.fromkeys(edges_of(("ornl", *CHAIN[2:])), STREAMS), 0.0).values())
    assert chain == pytest.approx(mbit(20.0))  # fills Denver-Sunnyvale
    assert skipping_atlanta < 0.9 * chain  # so only the whole chain counts as reaching 90%


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cold_start_on_shared_abilene_runs_at_90_percent_of_the_chain_within_15_simulated_seconds(
    seed: int,
) -> None:
    result = cold_start(seed)
    best = min(abilene_shared(noise=0.0).share(dict.fromkeys(edges_of(CHAIN), STREAMS), 0.0).values())
    reached = result.first_time_at(0.9 * best)
    assert reached is not None
    assert reached <= 15.0
    # Why: the chain's edges were all measured before the first decision (10 s, min_attempt_s), and the first move
    # goes straight onto it.
    at, first = result.decisions[0]
    assert isinstance(first, Switch)
    assert first.path == CHAIN
    assert at == pytest.approx(10.0)


def test_probes_go_down_the_chain_whose_guesses_leave_a_margin_not_to_the_shortcut_that_ties() -> None:
    # s, a, b, c, d in a line by round trip, the last hop the longest (30 of 60 ms). With s -> d measured, every
    # optimistic path ties at the guess for c -> d; s -> c and s -> b guess no more than 1.5 times that, a chain
    # of short hops 3 times. Fewest hops would probe s -> c -> d, then s -> b -> d. The chain's narrowest guess goes
    # first.
    memory = EdgeMemory()
    memory.observe("s", "d", 1000, 1.0, 0.0)
    rtt = {"a": 0.010, "b": 0.020, "c": 0.030, "d": 0.060}
    scheduler = PathScheduler(["s", "a", "b", "c", "d"], "s", "d", memory, SchedulerConfig(), rtt_s=rtt)
    assert scheduler.start(0.0).probes == (("c", "d"), ("s", "a"), ("a", "b"), ("b", "c"))
