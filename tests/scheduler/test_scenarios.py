"""The seeded scenario generator: deterministic, connected, and each kind has the property it promises."""

from __future__ import annotations

import math
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnet.scheduler import edges_of
from lnet.scheduler.scenarios import KINDS, SIZES, STREAMS, Scenario, physical_routes, scenario, steady_rate
from lnet.scheduler.simulator import DegradeLink, mbit, simulate_pinned

SEED = 20261128
ALL = range(len(KINDS) * len(SIZES))
"""One of each kind in each size class."""


@cache
def made(seed: int, index: int) -> Scenario:
    return scenario(seed, index)


def test_a_seed_and_index_build_the_same_network_bit_for_bit() -> None:
    for index in (3, 13):  # a small one and a 32-depot one
        first, again = scenario(SEED, index), scenario(SEED, index)
        assert first.network == again.network
        assert repr(first.network) == repr(again.network)
        assert first.oracles == again.oracles
        assert first.candidates == again.candidates
    assert scenario(SEED + 1, 3).network != scenario(SEED, 3).network


def test_the_index_picks_the_kind_and_every_size_class_is_covered() -> None:
    found = {(made(SEED, i).kind, made(SEED, i).size_class) for i in ALL}
    assert found == {(kind, size) for kind in KINDS for size in ("<=8", "16", "32")}
    sizes = [made(SEED, i).depots for i in ALL]
    assert min(sizes) >= 4
    assert max(sizes) == 32
    for i in ALL:
        assert len(made(SEED, i).network.vertices) == made(SEED, i).depots + 2


def check_promises(case: Scenario) -> None:
    """What every scenario promises: connected, in the documented ranges, and its kind's property."""
    network, src, dst = case.network, case.src, case.dst
    assert network.truth(src, dst)[1] > 0
    assert all(mbit(2.0) <= rate <= mbit(600.0) for rate in network.links.values())
    assert all(0.002 <= rtt <= 0.25 for rtt in network.rtts.values())
    assert all(rate > 0 for rate in network.capacities.values())
    direct = (src, dst)
    cold = case.cold
    assert cold.best_bps >= cold.direct_bps > 0
    match case.kind:
        case "direct":
            assert cold.best_paths == (direct,)
            assert cold.best_bps == cold.direct_bps
            assert all(steady_rate(network, direct) >= 1.1 * steady_rate(network, p) for p in case.candidates
                       if p != direct)
        case "detour":
            (best,) = cold.best_paths
            assert len(best) >= 3
            assert steady_rate(network, best) >= 1.3 * steady_rate(network, direct)
            assert cold.best_bps >= 1.2 * cold.direct_bps
        case "disjoint":
            assert 2 <= len(case.routes) <= 3
            links = [physical_routes(network, route) for route in case.routes]
            assert all(not links[i] & links[j] for i in range(len(links)) for j in range(i + 1, len(links)))
            best = max(steady_rate(network, path) for path in case.candidates)
            assert sum(steady_rate(network, route) for route in case.routes) >= 1.3 * best
            assert cold.routes_bps is not None
            assert cold.routes_bps >= 1.25 * cold.best_bps
        case "decoy":
            decoys = {depot for depot, role in case.roles.items() if role == "decoy"}
            assert 2 <= len(decoys) <= 4
            rtts = network.rtts_from(src)
            assert set(sorted(rtts, key=rtts.__getitem__)[: len(decoys)]) == decoys
            (best,) = cold.best_paths
            assert not decoys & set(best)
            for decoy in decoys:  # a decoy's every hop is narrow
                for u, v in network.capacities:
                    if decoy in (u, v):
                        assert network.share({(u, v): STREAMS}, 0.0)[(u, v)] <= 0.5 * cold.steady_bps
        case "shared":
            (gate,) = [depot for depot, role in case.roles.items() if role == "gate"]
            bottleneck = f"{gate}>{dst}"
            assert network.links[bottleneck] == min(network.links.values())
            for path in case.candidates:
                assert bottleneck in physical_routes(network, path)
            # Two edge-disjoint paths at once carry no more than the bottleneck.
            first = case.candidates[0]
            beside = [p for p in case.candidates[1:] if not set(edges_of(p)) & set(edges_of(first))]
            if beside:
                together = simulate_pinned(network, [first, beside[0]], streams=STREAMS, duration_s=60.0)
                assert together.mean_rate(30.0) <= 1.001 * network.links[bottleneck]
            assert cold.steady_bps >= 0.85 * network.links[bottleneck]
        case "change":
            assert len(case.change_at_s) == 2
            before, after = cold.best_paths
            assert before != after
            assert any(isinstance(e, DegradeLink) for e in network.events)
            at = case.change_at_s[0]
            assert steady_rate(network, after, at) >= 1.25 * steady_rate(network, before, at)
            warm_before, warm_after = case.warm.best_paths
            assert warm_before == after  # the warm run starts as the cold one ended
            assert steady_rate(network, warm_after, case.change_at_s[1]) >= steady_rate(
                network, warm_before, case.change_at_s[1]
            )
        case _:
            pytest.fail(f"unknown kind {case.kind}")
    if not case.change_at_s:  # the same truth in both windows; a pinned run's mean includes its ramp
        assert cold.steady_bps >= cold.best_bps
        assert case.warm.best_bps == pytest.approx(cold.best_bps, rel=0.01)


@pytest.mark.parametrize("index", ALL)
def test_every_kind_and_size_keeps_its_promise(index: int) -> None:
    check_promises(made(SEED, index))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, len(KINDS) - 1))
def test_any_seed_keeps_the_promises_of_the_small_scenarios(seed: int, index: int) -> None:
    check_promises(scenario(seed, index))


def test_the_oracles_direct_figure_is_the_pinned_direct_run() -> None:
    case = made(SEED, 1)
    run = simulate_pinned(case.network, [(case.src, case.dst)], streams=STREAMS, duration_s=case.cold.duration_s,
                          step_s=1.0, depth="adaptive")
    assert math.isclose(run.mean_rate(0.0), case.cold.direct_bps)
