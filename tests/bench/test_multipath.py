"""The multipath benchmark's pure parts: its topologies (routes disjoint or sharing one bottleneck, as designed),
the runs it plans (the like-for-like control), the figures and the targets. (The benchmark itself needs root and
over an hour: bench/multipath.py, docs/scheduler.md.)"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from .benches import load_bench

mp = load_bench("multipath")


def physical_links(case: Any, route: tuple[str, ...]) -> set[frozenset[str]]:
    """The emulated links a route's overlay edges cross."""
    topology = case.topology
    links: set[frozenset[str]] = set()
    for u, v in itertools.pairwise(route):
        links |= {frozenset(hop) for hop in itertools.pairwise(topology.route(u, v))}
    return links


@pytest.mark.parametrize("name", ["two", "three"])
def test_disjoint_routes_share_no_link(name: str) -> None:
    case = mp.CASES[name]
    assert case.disjoint
    for a, b in itertools.combinations(case.routes, 2):
        assert not physical_links(case, a) & physical_links(case, b), (a, b)
    # and every route is a real route: each overlay edge is one link of its own
    for route in case.routes:
        assert len(physical_links(case, route)) == len(route) - 1


def test_every_route_of_shared_crosses_the_one_bottleneck() -> None:
    case = mp.CASES["shared"]
    assert not case.disjoint
    assert case.depots == ["a", "b", "dst"]  # the routers run no depot
    bottleneck = frozenset(("left", "right"))
    for route in case.routes:
        assert bottleneck in physical_links(case, route), route
    rates = [case.route_mbps(route, 2) for route in case.routes]
    assert rates == pytest.approx([20 * 1448 / 1500] * 3)  # any one alone fills it
    assert case.design(2)["multi"] == pytest.approx(20 * 1448 / 1500)


def test_design_rates_and_which_targets_apply() -> None:
    two, three, shared = mp.CASES["two"], mp.CASES["three"], mp.CASES["shared"]
    payload = 1448 / 1500
    assert two.design(2) == pytest.approx({"widest": 20 * payload, "second": 16 * payload, "multi": 36 * payload})
    assert three.design(2) == pytest.approx({"widest": 22 * payload, "second": 16 * payload,
                                             "multi": 48 * payload})
    assert two.similar
    assert three.similar
    assert not shared.similar
    assert two.max_paths((2, 3)) == [2]  # two routes: a third path has nowhere to go
    assert three.max_paths((2, 3)) == [2, 3]


def test_the_control_keeps_as_many_blocks_in_flight_on_one_path() -> None:
    settings = mp.pc.Settings("1MiB", 1 << 20, 2, 3, False, None)
    plan = mp.Plan(settings, (2, 3))
    assert plan.warm_runs(mp.CASES["three"]) == [
        ("mp1", ["--max-paths", "1"]),
        ("mp2", ["--max-paths", "2"]), ("ctrl2", ["--max-paths", "1", "--max-inflight", "4"]),
        ("mp3", ["--max-paths", "3"]), ("ctrl3", ["--max-paths", "1", "--max-inflight", "6"]),
    ]
    assert plan.cold_run(mp.CASES["two"]) == ["--cold", "--max-paths", "2"]
    default = mp.Plan(mp.pc.Settings("1MiB", 1 << 20, None, 3, False, None), (2,))
    assert default.warm_runs(mp.CASES["two"])[-1] == ("ctrl2", ["--max-paths", "1", "--max-inflight", "32"])


def test_a_random_scenario_with_two_routes_runs_lnet_sends_three_paths() -> None:
    # A user runs lnet-send's default --max-paths 3 on any overlay; capped at the two routes, such a scenario ran no
    # multipath at all, and a seed's twelve scenarios gave one multipath/sum figure.
    settings = mp.pc.Settings("1MiB", 1 << 20, None, 1, True, None)
    plan = mp.Plan(settings, (3,))
    case = mp.random_multicase(mp.ts.random_case(4005239749, 5), plan)
    assert len(case.routes) == 2
    assert case.disjoint
    assert [kind for kind, _ in plan.warm_runs(case)] == ["mp1", "mp3", "ctrl3"]
    assert plan.cold_run(case) == ["--cold", "--max-paths", "3"]


def test_worst_over_single_enters_the_random_distribution_only_without_routes() -> None:
    figures = {"mp_mbps": {"3": 60.0}, "multi_paths": 3, "multi_over_sum": 0.7, "multi_over_single": 1.5,
               "worst_over_single": 1.5, "multi_over_control": 1.4, "sum_routes_mbps": 85.0,
               "best_route_mbps": 45.0, "mp1_mbps": 40.0, "cold_mbps": 30.0}
    assert mp.random_ratios(figures, disjoint=True)["worst_over_single"] is None
    assert mp.random_ratios(figures, disjoint=False)["worst_over_single"] == 1.5


def test_sizes_follow_pathchoice() -> None:
    settings = mp.pc.Settings("1MiB", 1 << 20, 2, 3, False, None)
    # 40 s at the routes' sum (34.75 Mbit/s) in 1 MiB blocks
    assert mp.transfer_size(mp.CASES["two"], settings) == 166 * (1 << 20)
    assert mp.transfer_size(mp.CASES["two"], mp.pc.Settings("1MiB", 1 << 20, 2, 1, True, None)) == 8 * (1 << 20)
    assert mp.transfer_size(mp.CASES["two"], mp.pc.Settings("1MiB", 1 << 20, 2, 1, False, 5)) == 5


def test_path_shares_from_per_path_figures_or_from_the_path_attempts() -> None:
    per_path = {"paths": [["src", "a", "dst"], ["src", "dst"]],
                "path_shares": [{"path": ["src", "a", "dst"], "bytes": 70, "share": 0.7},
                                {"path": ["src", "dst"], "bytes": 30, "share": 0.3}],
                "path_attempts": [{"path": ["src", "a", "dst"], "bytes": 100}]}
    assert mp.path_shares(per_path) == {"a": 70, "direct": 30}
    attempts = {"path_attempts": [{"path": ["src", "dst"], "bytes": 10}, {"path": ["src", "a", "dst"], "bytes": 80},
                                  {"path": ["src", "dst"], "bytes": 5}]}
    assert mp.path_shares(attempts) == {"direct": 15, "a": 80}


def run(kind: str, mbps: float, ok: bool = True) -> dict[str, Any]:
    return {"kind": kind, "ok": ok, "mbps": mbps if ok else None}


def test_figures_and_targets_where_routes_are_disjoint() -> None:
    case = mp.CASES["three"]
    runs = [run("route:d1,d2", 20.0), run("route:d1,d2", 21.0), run("route:d1,d2", 19.0),
            run("route:m", 15.0), run("route:direct", 9.0), run("route:direct", 0.0, ok=False),
            run("cold", 25.0), run("mp1", 19.0), run("mp1", 21.0),
            run("mp2", 30.0), run("ctrl2", 20.0), run("mp3", 38.0), run("mp3", 40.0), run("ctrl3", 22.0)]
    f = mp.figures_of(case, {"runs": runs})
    assert f["route_mbps"] == {"d1,d2": 20.0, "m": 15.0, "direct": 9.0}
    assert f["sum_routes_mbps"] == 44.0
    assert f["mp1_mbps"] == 20.0
    assert f["mp_mbps"] == {"2": 30.0, "3": 39.0}
    assert f["multi_paths"] == 3
    assert f["multi_over_sum"] == pytest.approx(39 / 44)
    assert f["multi_over_single"] == pytest.approx(39 / 20)
    assert f["multi_over_control"] == pytest.approx(39 / 22)
    assert f["targets"] == {"multi_over_sum": True, "multi_over_single": True}  # the shared rule does not apply
    runs += [run("mp3", 30.0), run("mp3", 31.0)]  # median 31: 0.70 of the sum, 1.55 x single
    f = mp.figures_of(case, {"runs": runs})
    assert f["targets"] == {"multi_over_sum": False, "multi_over_single": True}
    # a route that never ran leaves no sum, and the target unmeasured
    f = mp.figures_of(case, {"runs": [r for r in runs if r["kind"] != "route:m"]})
    assert f["sum_routes_mbps"] is None
    assert f["targets"]["multi_over_sum"] is None


def test_the_routes_at_once_are_their_rates_added_where_every_one_finished() -> None:
    # the routes pinned side by side (one lnet-send each): what they carry together on this machine, the reference
    # that shares its links and CPU as multipath does; a repetition with a failed route counts for nothing
    case = mp.CASES["three"]
    at_once = [{**run(f"together:{name}", mbps, ok), "rep": rep} for rep, name, mbps, ok in [
        (1, "d1,d2", 15.0, True), (1, "m", 12.0, True), (1, "direct", 7.0, True),
        (2, "d1,d2", 16.0, True), (2, "m", 0.0, False), (2, "direct", 8.0, True),
        (3, "d1,d2", 17.0, True), (3, "m", 13.0, True), (3, "direct", 8.0, True)]]
    runs = [run("route:d1,d2", 20.0), run("route:m", 15.0), run("route:direct", 9.0), run("mp1", 20.0),
            run("mp3", 34.0), *at_once]
    f = mp.figures_of(case, {"runs": runs})
    assert f["together_mbps"] == pytest.approx((34.0 + 38.0) / 2)  # repetitions 1 and 3
    assert f["multi_over_together"] == pytest.approx(34 / 36)
    assert f["multi_over_sum"] == pytest.approx(34 / 44)
    assert mp.random_ratios(f, disjoint=True)["multi_over_together"] == pytest.approx(34 / 36)
    f = mp.figures_of(case, {"runs": runs[:5]})  # none ran: no reference
    assert f["together_mbps"] is None
    assert f["multi_over_together"] is None


def test_where_every_route_shares_a_bottleneck_no_multipath_run_may_lose() -> None:
    case = mp.CASES["shared"]
    runs = [run("route:direct", 18.0), run("route:a", 18.0), run("route:b", 18.0), run("mp1", 18.0),
            run("mp2", 17.5), run("mp3", 18.2)]
    f = mp.figures_of(case, {"runs": runs})
    assert f["sum_routes_mbps"] is None  # routes through one bottleneck do not add up
    assert f["multi_over_sum"] is None
    assert f["worst_over_single"] == pytest.approx(17.5 / 18)
    assert f["targets"] == {"worst_over_single": True}
    f = mp.figures_of(case, {"runs": [*runs[:-1], run("mp3", 16.0)]})
    assert f["worst_over_single"] == pytest.approx(16 / 18)
    assert f["targets"] == {"worst_over_single": False}
