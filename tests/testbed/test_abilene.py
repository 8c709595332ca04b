"""abilene.toml reproduces the shape of the logistics paper's Tables 1 and 2,
measured with plain single TCP streams: the
direct ORNL -> Sunnyvale transfer is slower than every edge of the four-depot chain, the chain's bottleneck
(Denver -> Sunnyvale) is about twice the direct throughput, and relaying through New York or Washington is worse
than direct, and skipping any depot of the chain is worse than the chain. Root only; about 30 s."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from lnet.testbed import Testbed
from lnet.testbed.measure import tcp_throughput

from .conftest import TOPOLOGIES

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("requires_root")]

CHAIN = [("ornl", "atl"), ("atl", "ind"), ("ind", "kc"), ("kc", "den"), ("den", "svl")]
SECONDS, SKIP_S = 8.0, 2.0


async def measure_all(tb: Testbed, pairs: list[tuple[str, str]], port: int) -> dict[tuple[str, str], float]:
    """Measure several streams at once (callers only group streams that share no bottleneck)."""
    results: dict[tuple[str, str], float] = {}

    async def one(src: str, dst: str, p: int) -> None:
        results[(src, dst)] = await tcp_throughput(tb, src, dst, seconds=SECONDS, skip_s=SKIP_S, port=p)

    async with trio.open_nursery() as nursery:
        for i, (src, dst) in enumerate(pairs):
            nursery.start_soon(one, src, dst, port + i)
    return results


async def test_abilene_direct_versus_four_depot_chain(bed_name: str, state_root: Path) -> None:
    async with Testbed(TOPOLOGIES / "abilene.toml", name=bed_name, state_root=state_root) as tb:
        # the chain's edges use disjoint links, so they are measured together
        edges = await measure_all(tb, CHAIN, 5300)
        # the direct stream crosses every chain link and New York -> Sunnyvale shares the last three with it, but
        # together they stay below every link's rate (window-limited, 5.1 + 3.5 < 20 Mbit/s)
        direct_and_nyc = await measure_all(tb, [("ornl", "svl"), ("nyc", "svl")], 5400)
        # edges that skip a depot, with Washington -> Sunnyvale; window-limited, they fit the links together
        skips = await measure_all(tb, [("ornl", "ind"), ("atl", "kc"), ("ind", "den"), ("wdc", "svl")], 5500)
    direct = direct_and_nyc[("ornl", "svl")]
    everything = {**edges, **direct_and_nyc, **skips}
    report = {f"{a}->{b}": round(v, 2) for (a, b), v in everything.items()}
    print("abilene Mbit/s:", report)

    # Table 1: the direct transfer is slow, every edge of the best path is faster
    assert all(edges[e] > 1.5 * direct for e in CHAIN), report
    # Table 2: Denver -> Sunnyvale is the bottleneck edge, about twice the direct throughput
    bottleneck = min(edges.values())
    assert edges[("den", "svl")] == bottleneck, report
    assert 1.6 <= bottleneck / direct <= 3.0, report
    # the first edge is the fastest, as ORNL-Atlanta's 17.44 Mbit/s was
    assert edges[("ornl", "atl")] == max(edges.values()), report
    # paths through New York or Washington are worse than direct: their leg to Sunnyvale is
    assert direct_and_nyc[("nyc", "svl")] < direct, report
    assert skips[("wdc", "svl")] < direct, report
    # the four-depot chain is the best path: a chain that skips a depot has an edge below its bottleneck
    for skip in [("ornl", "ind"), ("atl", "kc"), ("ind", "den")]:
        assert skips[skip] < 0.95 * bottleneck, report
