"""The seeded replica sets of `bench/multisource.py --random`: deterministic for a seed, in range, the promised
kinds and bottlenecks, and topologies the testbed's loader takes in the shape of replicas.toml."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnet.testbed.replica_sets import (
    ACCESS_DELAY_MS,
    CHANGE_AT,
    KINDS,
    MAX_REPLICAS,
    MIN_REPLICAS,
    REPLICA_DELAY_MS,
    REPLICA_MBIT,
    SLOW_FACTOR,
    SUM_MBIT,
    replica_set,
)
from lnet.testbed.topology import Topology

seeds = st.integers(min_value=0, max_value=2**32 - 1)
indices = st.integers(min_value=0, max_value=200)
ROUNDING = 0.01  # every figure is rounded to 3 places


@given(seeds, indices)
def test_a_seed_and_index_give_the_same_set_every_time(seed: int, index: int) -> None:
    assert replica_set(seed, index) == replica_set(seed, index)
    assert replica_set(seed, index).to_toml() == replica_set(seed, index).to_toml()


def test_different_seeds_give_different_sets() -> None:
    assert len({replica_set(seed, 0) for seed in range(20)}) == 20


@given(seeds, indices)
def test_rates_and_delays_are_in_range(seed: int, index: int) -> None:
    rs = replica_set(seed, index)
    assert MIN_REPLICAS <= len(rs.replicas) <= MAX_REPLICAS
    assert [r.name for r in rs.replicas] == [f"r{i + 1}" for i in range(len(rs.replicas))]
    for r in rs.replicas:
        assert REPLICA_MBIT[0] - ROUNDING <= r.rate_mbit <= REPLICA_MBIT[1] + ROUNDING
        assert REPLICA_DELAY_MS[0] - ROUNDING <= r.delay_ms <= REPLICA_DELAY_MS[1] + ROUNDING
    assert SUM_MBIT[0] - ROUNDING <= sum(rs.rates_mbit.values()) <= SUM_MBIT[1] + ROUNDING
    assert ACCESS_DELAY_MS[0] - ROUNDING <= rs.access_delay_ms <= ACCESS_DELAY_MS[1] + ROUNDING
    # round trips client-replica from a few milliseconds to a few hundred
    assert all(2.0 <= rs.round_trip_ms(h) <= 2 * (ACCESS_DELAY_MS[1] + REPLICA_DELAY_MS[1]) + ROUNDING
               for h in rs.hosts)


@given(seeds, indices)
def test_the_kind_and_the_bottleneck_are_the_ones_the_index_promises(seed: int, index: int) -> None:
    rs = replica_set(seed, index)
    assert rs.kind == KINDS[index % 3]
    assert rs.access_is_bottleneck == ((index // 3) % 2 == 1)
    if rs.kind == "steady":
        assert rs.event is None
        assert rs.rates_after_mbit() == rs.rates_mbit
        return
    assert rs.event is not None
    assert rs.event.replica in rs.hosts
    assert CHANGE_AT[0] - ROUNDING <= rs.event.at_fraction <= CHANGE_AT[1] + ROUNDING
    after = rs.rates_after_mbit()
    assert [h for h in rs.hosts if after[h] != rs.rates_mbit[h]] == [rs.event.replica]
    if rs.kind == "die":
        assert rs.event.factor == 0.0
        assert after[rs.event.replica] == 0.0
    else:
        assert SLOW_FACTOR[0] - ROUNDING <= rs.event.factor <= SLOW_FACTOR[1] + ROUNDING


def test_twelve_consecutive_sets_cover_every_kind_with_and_without_the_access_bottleneck() -> None:
    pairs = [(rs.kind, rs.access_is_bottleneck) for rs in (replica_set(5, i) for i in range(12))]
    assert sorted(set(pairs)) == sorted((kind, b) for kind in KINDS for b in (False, True))
    assert all(pairs.count(pair) == 2 for pair in set(pairs))


@settings(max_examples=50)
@given(seeds, indices)
def test_the_topology_loads_with_the_testbeds_loader_in_the_shape_of_replicas_toml(seed: int, index: int) -> None:
    rs = replica_set(seed, index)
    topo = Topology.parse(rs.to_toml())
    assert topo == rs.topology()
    assert topo.name == rs.name
    assert topo.host_names == ["client", "isp", *rs.hosts]
    access = topo.link("client", "isp")
    assert (access.rate_mbit, access.delay_ms) == (rs.access_mbit, rs.access_delay_ms)
    for r in rs.replicas:
        link = topo.link("isp", r.name)
        assert (link.rate_mbit, link.delay_ms, link.loss) == (r.rate_mbit, r.delay_ms, 0.0)
        assert topo.route("client", r.name) == ["client", "isp", r.name]
    assert len(topo.links) == len(rs.replicas) + 1


def test_a_set_describes_itself() -> None:
    rs = replica_set(7, 2)
    assert rs.kind == "die"
    assert rs.event is not None
    assert rs.describe().startswith(f"{len(rs.replicas)} replicas at ")
    assert f"{rs.event.replica} dies at" in rs.describe()
    assert rs.to_toml().startswith(f"# {rs.describe()}\n")


@pytest.mark.parametrize("index", range(6))
def test_the_names_fit_the_testbeds_rules(index: int) -> None:
    assert Topology.parse(replica_set(2**32 - 1, index).to_toml()).name == f"rs-{2**32 - 1}-{index}"
