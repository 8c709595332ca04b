"""A scenario's physical network, and the testbed topology made of it: complete (the overlay rebuilds the
scenario's network), scaled as promised, and loaded by the testbed's own loader with the simulator's routes."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnet.scheduler.scenarios import (
    KINDS,
    MAX_LOSS,
    MIN_WINDOW_BYTES,
    TESTBED_FASTEST_MBIT,
    TESTBED_MTU,
    Scenario,
    emulation_scale,
    overlay,
    scenario,
    topology_file,
    topology_of,
)
from lnet.scheduler.simulator import SimNetwork
from lnet.testbed.topology import Topology

SEED = 20261128
SMALL = range(len(KINDS))
"""One scenario of each kind in the <=8-depot class: the ones that go to the testbed."""
MSS = 1448


def same_network(a: SimNetwork, b: SimNetwork) -> None:
    assert a.vertices == b.vertices
    assert a.capacities == b.capacities
    assert a.routes == b.routes
    assert a.rtts == b.rtts
    assert a.links == b.links
    assert a.ramp_s == b.ramp_s
    assert set(a.events) == set(b.events)  # the same changes, listed edge by edge in another order


@pytest.mark.parametrize("index", [*SMALL, 6, 11])  # and two of the 16-depot class
def test_the_physical_network_rebuilds_the_scenarios_own(index: int) -> None:
    case = scenario(SEED, index)
    assert case.physical.hosts == case.network.vertices
    same_network(overlay(case.physical), case.network)
    assert case.physical.factor == 1.0
    assert (case.kind == "change") == bool(case.physical.changes)


def test_the_topology_is_the_same_for_a_seed_and_index() -> None:
    first = topology_file(scenario(SEED, 2).physical.scaled(0.5), "r2")
    assert topology_file(scenario(SEED, 2).physical.scaled(0.5), "r2") == first
    assert topology_file(scenario(SEED + 1, 2).physical.scaled(0.5), "r2") != first


def check_topology(case: Scenario) -> None:
    """Scaled for the testbed: every host and link there, at the promised rates, windows and losses, loaded by
    the testbed's loader from the dict and the file alike, routed as the simulator routes."""
    factor = emulation_scale(case.physical)
    scaled = case.physical.scaled(factor)
    assert 0 < factor <= 1
    assert max(link.rate_mbit for link in scaled.links) <= TESTBED_FASTEST_MBIT * (1 + 1e-12)
    topology = Topology.from_dict(topology_of(scaled, "r0"))
    assert Topology.parse(topology_file(scaled, "r0", "a comment")).to_dict() == topology.to_dict()
    assert topology.mtu == TESTBED_MTU
    assert topology.host_names == list(case.network.vertices)
    for host in topology.hosts:
        window = round(case.physical.windows_kib[host.name] * 1024 * factor)
        if host.name in scaled.raised_windows:
            assert window < MIN_WINDOW_BYTES
            assert host.window_bytes == MIN_WINDOW_BYTES
        else:
            assert host.window_bytes == window
    assert len(topology.links) == len(case.physical.links)
    for original in case.physical.links:
        link = topology.link(original.a, original.b)
        assert link.rate_mbit == pytest.approx(original.rate_mbit * factor * TESTBED_MTU / MSS, rel=1e-12)
        assert link.delay_ms == pytest.approx(original.delay_s * 1000, rel=1e-12)
        if (original.a, original.b) in scaled.capped_losses:
            assert link.loss == MAX_LOSS < original.loss / factor**2
        else:
            assert link.loss == pytest.approx(original.loss / factor**2, rel=1e-12)
    # The simulator's view of the scaled network: each edge's per-stream rate is the factor times the scenario's,
    # where no clamp touches it; and the testbed routes every pair over the links the simulator does.
    network = overlay(scaled.static())
    capped = {f"{a}>{b}" for a, b in scaled.capped_losses} | {f"{b}>{a}" for a, b in scaled.capped_losses}
    for (u, v), capacity in network.capacities.items():
        route = network.routes[(u, v)]
        if v not in scaled.raised_windows and not capped & set(route):
            # windows are whole bytes: within one byte in MIN_WINDOW_BYTES
            assert capacity == pytest.approx(factor * case.network.capacities[(u, v)], rel=1e-4)
        hosts = topology.route(u, v)
        assert [f"{a}>{b}" for a, b in zip(hosts, hosts[1:], strict=False)] == list(route)
        assert math.isclose(network.rtts[(u, v)], case.network.rtts[(u, v)])


@pytest.mark.parametrize("index", SMALL)
def test_a_small_scenario_becomes_a_testbed_topology(index: int) -> None:
    check_topology(scenario(SEED, index))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, len(KINDS) - 1))
def test_any_small_scenario_becomes_a_testbed_topology(seed: int, index: int) -> None:
    check_topology(scenario(seed, index))


def test_scaling_raises_small_windows_and_caps_loss() -> None:
    physical = scenario(SEED, 1).physical
    scaled = physical.scaled(1e-3)
    assert set(scaled.raised_windows) == set(physical.hosts)
    assert all(scaled.windows_kib[h] * 1024 == MIN_WINDOW_BYTES for h in physical.hosts)
    lossy = {(link.a, link.b) for link in physical.links if link.loss > 0}
    assert set(scaled.capped_losses) == lossy
    assert scaled.factor == 1e-3
    with pytest.raises(ValueError, match="scale factor"):
        physical.scaled(1.5)
