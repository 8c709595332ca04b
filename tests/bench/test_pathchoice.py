"""The path-choice benchmark's pure parts: its topologies, the widest paths, the figures and the targets.
(The benchmark itself needs root and an hour or two: bench/pathchoice.py, docs/scheduler.md.)"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.testbed.topology import Topology

from .benches import REPO, load_bench

pc = load_bench("pathchoice")


def design_best(case: Any) -> tuple[list[str], float]:
    ranked, _ = pc._design(case, 2)
    return ranked[0]


def test_seven_topologies_each_with_its_own_best_path() -> None:
    cases = {name: make(11) for name, make in pc.CASES.items()}
    assert len(cases) >= 6
    for case in cases.values():
        assert Topology.parse(case.toml).name == case.name
    assert design_best(cases["abilene"])[0] == ["ornl", "atl", "ind", "kc", "den", "svl"]
    assert design_best(cases["detour"])[0] == ["src", "d1", "d2", "dst"]
    assert design_best(cases["lossy"])[0] == ["src", "m1", "m2", "dst"]
    assert design_best(cases["decoy"])[0] == ["src", "good", "dst"]
    assert design_best(cases["direct"])[0] == ["src", "dst"]
    assert cases["direct"].direct_best
    shared = cases["shared"]
    assert shared.depots == ["a", "b", "dst"]  # the routers run no depot
    bottleneck = shared.topology.link("left", "right")
    for u, v in [("src", "dst"), ("src", "b"), ("a", "b"), ("a", "dst")]:
        route = shared.topology.route(u, v)
        assert ("left", "right") in list(zip(route, route[1:], strict=False)), (u, v, bottleneck)
    window = cases["window"]
    assert len(design_best(window)[0]) >= 4
    assert window.topology.route("src", "dst") == ["src", "a", "b", "c", "dst"]  # direct goes through the depots


def test_generated_topologies_follow_the_seed() -> None:
    for name in ("detour", "lossy", "window", "decoy", "shared", "direct"):
        make = pc.CASES[name]
        assert make(11).toml == make(11).toml
        assert make(11).toml != make(12).toml
        assert make(12).seed == 12
        assert "seed 12" in make(12).toml


def test_edges_leave_out_the_destination_and_enter_no_source() -> None:
    case = pc.CASES["detour"](11)
    assert case.edges() == [("src", "d1"), ("src", "d2"), ("src", "dst"), ("d1", "d2"), ("d1", "dst"),
                            ("d2", "d1"), ("d2", "dst")]


def test_design_figures_are_the_narrowest_of_rate_window_and_loss() -> None:
    line3 = Topology.load(REPO / "deploy" / "topologies" / "line3.toml")  # 128 KiB windows, 10 ms, 50 Mbit/s hops
    assert pc.design_mbps(line3, "src", "dst", 1) == pytest.approx(128 * 1024 * 8 / 0.040 / 1e6)
    assert pc.design_mbps(line3, "src", "dst", 2) == pytest.approx(50 * 8948 / 9000)
    lossy = Topology.parse('mtu = 1500\n[hosts.a]\n[hosts.b]\n[[links]]\na = "a"\nb = "b"\ndelay_ms = 10\n'
                           'rate_mbit = 100\nloss = 0.01\n')
    assert pc.design_mbps(lossy, "a", "b", 1) == pytest.approx(1.22 * 1448 * 8 / (0.020 * 0.1) / 1e6)


def test_widest_paths_rank_by_the_narrowest_edge_then_by_hops() -> None:
    figures = {("s", "a"): 30.0, ("a", "t"): 20.0, ("s", "t"): 20.0, ("s", "b"): 50.0, ("b", "t"): 10.0,
               ("a", "b"): 40.0, ("b", "a"): 40.0}
    ranked = pc.widest_paths(["s", "a", "b", "t"], "s", "t", figures)
    assert ranked == [(["s", "t"], 20.0), (["s", "a", "t"], 20.0), (["s", "b", "a", "t"], 20.0)]
    ranked = pc.widest_paths(["s", "a", "b", "t"], "s", "t", {**figures, ("a", "t"): 35.0}, k=2)
    assert ranked == [(["s", "b", "a", "t"], 35.0), (["s", "a", "t"], 30.0)]
    assert pc.widest_paths(["s", "a", "t"], "s", "t", {("s", "a"): 5.0})[0][1] == 0.0  # missing edges are 0


def timeline(points: list[tuple[float, int]]) -> list[dict[str, Any]]:
    return [{"t": t, "bytes": b, "mbps": 0.0, "path": ["s", "t"]} for t, b in points]


def test_the_rate_once_going_leaves_out_the_start() -> None:
    # nothing for 2 s, then 1 MB seen every tick (0.5 s): arrivals placed mid-tick at 2.25, 2.75, ..., 4.25
    points = [(0.5, 0), (1.0, 0), (1.5, 0), (2.0, 0)] + [(2.0 + 0.5 * k, k * 1_000_000) for k in range(1, 6)]
    assert pc.going_mbps({"timeline": timeline(points)}) == pytest.approx(4 * 8 / 2.0)
    assert pc.going_mbps({"timeline": timeline([(1.0, 5)])}) is None


def run(kind: str, mbps: float, points: list[tuple[float, int]] | None = None) -> dict[str, Any]:
    return {"kind": kind, "ok": True, "mbps": mbps, "summary": {"timeline": timeline(points or [])}}


def test_figures_and_targets() -> None:
    case = pc.CASES["detour"](11)
    ramp = [(float(t), t * 1_250_000) for t in range(1, 41)]  # 10 Mbit/s from the start
    late = [(float(t), 0) for t in range(1, 20)] + [(float(t), (t - 19) * 2_500_000) for t in range(20, 41)]
    result = {
        "oracle": {"path": ["src", "d1", "d2", "dst"], "mbps": 18.0, "going_mbps": 20.0, "weakest_hop_mbps": 25.0},
        "runs": [run("direct", 6.0), run("direct", 7.0), run("direct", 8.0), run("cold", 12.0, late),
                 run("cold", 15.0, ramp), run("cold", 14.0, late), run("warm", 17.0), run("warm", 16.0),
                 {"kind": "warm", "ok": False}],
    }
    f = pc.figures_of(case, result)
    assert f["direct_mbps"] == 7.0
    assert f["warm_mbps"] == 16.5
    assert f["warm_over_oracle"] == pytest.approx(16.5 / 18.0)
    assert f["cold_over_oracle"] == pytest.approx(14.0 / 18.0)
    assert f["chain_over_hop"] == pytest.approx(0.8)
    # 90% of 20 = 18 Mbit/s over the trailing 4 s: never at 10 Mbit/s; the late runs' first arrival (20 s) is
    # spread over the 20 s before it, so the first window wholly at 20 Mbit/s is [20, 24]; the median of
    # (24, never, 24) is 24 s
    assert f["cold_seconds_to_90pct"] == 24.0
    assert f["targets"] == {"warm_over_oracle": True, "cold_over_oracle": True, "chain_over_hop": False,
                            "cold_seconds_to_90pct": True}  # warm/direct counts only where direct is best
    direct = pc.CASES["direct"](11)
    result["oracle"]["path"] = ["src", "dst"]
    assert pc.figures_of(direct, result)["targets"]["warm_over_direct"] is True
    result["runs"] = [r for r in result["runs"] if r["kind"] != "cold"] + [run("cold", 12.0, ramp)]
    f = pc.figures_of(direct, result)
    assert math.isinf(f["cold_seconds_to_90pct"])
    assert f["targets"]["cold_seconds_to_90pct"] is False
    # 20 Mbit/s in the first second (TCP before its first loss on a lossy link), 10 from then on: not a reach
    burst = [(1.0, 2_500_000)] + [(float(t), 2_500_000 + (t - 1) * 1_250_000) for t in range(2, 41)]
    result["runs"] = [r for r in result["runs"] if r["kind"] != "cold"] + [run("cold", 12.0, burst)]
    assert math.isinf(pc.figures_of(direct, result)["cold_seconds_to_90pct"])


def test_figures_are_recomputed_from_a_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A run saved with the old rule's figure (a burst read as reaching 90% at 1 s): --figures recomputes it.
    burst = [(1.0, 2_500_000)] + [(float(t), 2_500_000 + (t - 1) * 1_250_000) for t in range(2, 41)]
    result = {
        "topology": "detour", "size": 50 * 2**20,
        "oracle": {"path": ["src", "d1", "d2", "dst"], "mbps": 18.0, "going_mbps": 20.0, "weakest_hop_mbps": 21.0},
        "runs": [run("direct", 7.0), run("cold", 12.0, burst), run("warm", 17.0)], "widest": [],
        "figures": {"cold_seconds_to_90pct": 1.0},
    }
    args = {"topologies": "detour", "runs": "1", "max_inflight": "2", "block_size": "1MiB", "seed": "11",
            "quick": "False"}
    (tmp_path / "pathchoice.json").write_text(json.dumps({"args": args, "topologies": [result]}))
    assert trio.run(pc.main, ["--figures", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    assert math.isinf(line["topologies"]["detour"]["cold_seconds_to_90pct"])
    assert "2 in flight per hop" in out
    assert trio.run(pc.main, ["--figures", str(tmp_path / "nothing")]) == 2


def test_the_oracle_also_runs_a_direct_path_that_nearly_ties() -> None:
    case = pc.CASES["direct"](11)
    figures = {edge: 0.0 for edge in case.edges()}
    figures.update({("src", "n1"): 40.0, ("n1", "dst"): 24.0, ("src", "n2"): 24.0, ("n2", "dst"): 40.0,
                    ("n1", "n2"): 24.0, ("src", "dst"): 21.0})
    paths = [path for path, _ in pc.oracle_candidates(case, figures)]
    assert paths == [["src", "n1", "dst"], ["src", "n2", "dst"], ["src", "n1", "n2", "dst"], ["src", "dst"]]
    figures[("src", "dst")] = 20.0  # below 85% of 24: not run
    assert len(pc.oracle_candidates(case, figures)) == 3


def test_the_simulator_alone_runs_the_random_scenarios_without_root(capsys: pytest.CaptureFixture[str]) -> None:
    # --simulate-only: each scenario's ratios from the simulator's side of the benchmark, then their distribution
    assert trio.run(pc.main, ["--random", "3", "--seed", "7", "--quick", "--simulate-only"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("r0")]
    assert [row.split()[:2] for row in rows] == [["r000", "direct"], ["r001", "detour"], ["r002", "disjoint"]]
    rc = pc.ts.random_case(7, 0)
    settings = pc.Settings.from_args(pc.parse_args(["--random", "3", "--quick"]))
    sim = pc.simulate_random(rc, pc.replace(settings, inflight=None, max_paths=3))
    assert f"warm / oracle {sim['warm_mbps'] / sim['oracle_mbps']:.2f}" in rows[0]
    assert "the simulator alone, 3 scenarios:" in out
    assert any(line.startswith("warm / oracle") and "median" in line and "p10" in line for line in out.splitlines())


def test_only_runs_the_named_random_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    # --only: a subset of --random N's scenarios by index, to run again the ones that missed (an A/B of a few)
    assert trio.run(pc.main, ["--random", "12", "--seed", "7", "--only", "2,19", "--quick", "--simulate-only"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("r0")] == ["r002", "r019"]
    assert "--only 2,19" in out  # the rerun command printed says so


@pytest.mark.parametrize(("argv", "error"), [
    (["--only", "2"], "--only needs --random N"),
    (["--random", "3", "--only", "7"], "7 is not among --random 3's scenarios (0, 1, 2)"),
    (["--random", "3", "--only", "1,x"], "comma-separated scenario indices"),
])
def test_only_names_scenarios_of_the_random_set(argv: list[str], error: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        pc.parse_args(argv)
    assert error in capsys.readouterr().err


def test_a_pinned_run_stopped_as_too_slow_is_no_failure_but_a_failed_transfer_is() -> None:
    stopped = {"ok": False, "error": "stopped after 60 s", "stopped_s": 60.0}
    row = {"runs": [{**stopped, "kind": "direct"}, {"ok": True, "kind": "cold"}], "widest": [stopped]}
    assert pc.failures([row]) == 0
    row["runs"].append({"ok": False, "error": "exit 1: ...", "kind": "warm"})
    assert pc.failures([row]) == 1
