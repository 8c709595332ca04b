"""The kernel-netem backend (for kernels that have netem; this machine's has not): its exact commands, its
veth/forwarding/route plumbing live (without the tc lines), and a clear refusal where netem is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnet.testbed import Link, Testbed, TestbedError, Topology
from lnet.testbed.measure import rtt
from lnet.testbed.netem import kernel_has_netem, plan_commands, reshape_commands

from .conftest import TOPOLOGIES, leftovers


def test_plan_for_line3_is_veths_tc_and_routes() -> None:
    topo = Topology.load(TOPOLOGIES / "line3.toml")
    cmds = [" ".join(c) for c in plan_commands("ci", topo)]
    assert cmds[:2] == ["ip -n lnet.ci.src link set lo up", "ip -n lnet.ci.src addr add 10.77.0.1/32 dev lo"]
    assert ("ip link add lk0a netns lnet.ci.src mtu 9000 type veth peer name lk0b netns lnet.ci.depot mtu 9000"
            in cmds)
    assert "ip -n lnet.ci.src addr add 10.78.0.2/24 dev lk0a" in cmds
    assert "tc -n lnet.ci.src qdisc add dev lk0a root handle 1: tbf rate 50mbit burst 25000 latency 20ms" in cmds
    assert "tc -n lnet.ci.depot qdisc add dev lk0b parent 1:1 handle 10: netem delay 10ms limit 100000" in cmds
    # src reaches dst through the depot, which forwards
    assert "ip -n lnet.ci.src route replace 10.77.0.3/32 via 10.78.0.3 src 10.77.0.1" in cmds
    assert "ip -n lnet.ci.dst route replace 10.77.0.1/32 via 10.78.1.2 src 10.77.0.3" in cmds
    unshaped = [" ".join(c) for c in plan_commands("ci", topo, shape=False)]
    assert not any(c.startswith("tc ") for c in unshaped)
    assert len(unshaped) == len(cmds) - 8  # two tc lines at each end of two links


def test_reshape_changes_in_place_or_replaces() -> None:
    topo = Topology.load(TOPOLOGIES / "line3.toml")
    slower = Link("src", "depot", delay_ms=30.0, rate_mbit=10.0, loss=0.01)
    cmds = [" ".join(c) for c in reshape_commands("ci", topo, slower)]
    assert cmds == [
        "tc -n lnet.ci.src qdisc change dev lk0a root handle 1: tbf rate 10mbit burst 18000 latency 60ms",
        "tc -n lnet.ci.src qdisc change dev lk0a parent 1:1 handle 10: netem delay 30ms loss 1% limit 100000",
        "tc -n lnet.ci.depot qdisc change dev lk0b root handle 1: tbf rate 10mbit burst 18000 latency 60ms",
        "tc -n lnet.ci.depot qdisc change dev lk0b parent 1:1 handle 10: netem delay 30ms loss 1% limit 100000",
    ]
    unlimited = [" ".join(c) for c in reshape_commands("ci", topo, Link("src", "depot", delay_ms=10.0))]
    assert unlimited[0] == "tc -n lnet.ci.src qdisc del dev lk0a root"
    assert unlimited[1] == "tc -n lnet.ci.src qdisc add dev lk0a root handle 1: netem delay 10ms limit 100000"


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
async def test_netem_plumbing_forwards_through_hosts(bed_name: str, state_root: Path) -> None:
    async with Testbed(TOPOLOGIES / "line3.toml", name=bed_name, state_root=state_root,
                       backend="netem-unshaped") as tb:
        route = await tb.run("src", ["ip", "route", "get", tb.address("dst")])
        assert f"via {tb.link_address('depot', 'src')}" in route.stdout.decode()
        result = await rtt(tb, "src", "dst", count=5)
        assert result.received == 5
        assert (await tb.status())["backend"] == "netem-unshaped"
    assert leftovers(bed_name) == []


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
async def test_netem_backend_where_the_kernel_has_it_else_a_clear_refusal(bed_name: str, state_root: Path) -> None:
    topo = Topology.parse('[hosts.a]\n[hosts.b]\n[[links]]\na = "a"\nb = "b"\ndelay_ms = 25\nrate_mbit = 100\n')
    if kernel_has_netem():
        async with Testbed(topo, name=bed_name, state_root=state_root, backend="netem") as tb:
            assert (await rtt(tb, "a", "b", count=20)).median_ms == pytest.approx(50.0, rel=0.05)
    else:
        with pytest.raises(TestbedError, match="no netem qdisc"):
            async with Testbed(topo, name=bed_name, state_root=state_root, backend="netem"):
                pass
        async with Testbed(topo, name=bed_name, state_root=state_root) as tb:  # auto: userspace here
            assert (await tb.status())["backend"] == "userspace"
    assert leftovers(bed_name) == []
