"""The multi-source benchmark's pure parts: the competitors' command lines, the sweeps, the scenarios' physical
limits, the estimate and the multi-source targets. (The benchmark itself needs root and the testbed:
bench/multisource.py, docs/client.md.)"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lnet.testbed.replica_sets import replica_set
from lnet.testbed.topology import Topology

from .benches import load_bench

MiB = 1024 * 1024


ms = load_bench("multisource")
TOOLS = {"aria2c": "/usr/bin/aria2c", "nginx": "/usr/sbin/nginx"}
URLS = ["http://10.0.0.2:8080/f", "http://10.0.0.3:8080/f"]


def test_aria2_fair_and_default_differ_only_by_the_fair_flags(tmp_path: Path) -> None:
    out = tmp_path / "downloads" / "x.bin"
    fair = ms.competitor_argv("aria2-fair", URLS, out, "ab" * 32, TOOLS, Path("lnet-get"), [])
    default = ms.competitor_argv("aria2-default", URLS, out, "ab" * 32, TOOLS, Path("lnet-get"), [])
    assert [a for a in fair if a not in ms.aria2_fair(len(URLS))] == default
    assert "--split=2" in fair  # one connection to each mirror, as lnet-get keeps
    assert "--split=7" in ms.aria2_fair(7)  # a random set of 7: all of them, not aria2's 6 of the named testbed
    assert not any(a.startswith(("--split", "--max-connection", "--min-split")) for a in default)
    assert default[-2:] == URLS


def test_an_mdtp_variant_passes_its_tail_and_depth(tmp_path: Path) -> None:
    out = tmp_path / "downloads" / "x.bin"
    argv = ms.competitor_argv("mdtp:tail=hedge:depth=3", URLS, out, "ab" * 32, TOOLS, Path("lnet-get"), ["--x"])
    assert argv[argv.index("--strategy") + 1] == "mdtp"
    assert argv[-5:] == ["--x", "--tail", "hedge", "--depth", "3"]


def test_sweeps_add_every_combination_but_the_default() -> None:
    assert ms.sweep_variants("", "") == []
    assert ms.sweep_variants("split,hedge", "2,3") == [
        "mdtp:tail=split:depth=3", "mdtp:tail=hedge:depth=2", "mdtp:tail=hedge:depth=3"]
    with pytest.raises(SystemExit):
        ms.sweep_variants("fastest", "")
    assert ms.parse_list("aria2,mdtp:tail=hedge:depth=1", ms.COMPETITORS, "competitor") == [
        "aria2-fair", "mdtp:tail=hedge:depth=1"]
    with pytest.raises(SystemExit):
        ms.parse_list("wget", ms.COMPETITORS, "competitor")


def test_a_change_at_half_time_makes_the_limit_the_harmonic_mean() -> None:
    tb = SimpleNamespace(topology=Topology.load(ms.TOPOLOGY))
    hosts = ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert ms.run_limit_mbit(tb, hosts, ms.named_change("normal")) == pytest.approx(140.0)
    assert ms.run_limit_mbit(tb, hosts, ms.named_change("slowdown")) == pytest.approx(2 / (1 / 140 + 1 / 110))
    assert ms.run_limit_mbit(tb, hosts, ms.named_change("dies")) == pytest.approx(2 / (1 / 140 + 1 / 100))


def test_the_quick_plan_and_its_estimate() -> None:
    args = argparse.Namespace(sizes="64MiB", scenarios="normal,dies", competitors="aria2-fair,aria2-default,mdtp",
                              large_competitors="aria2-fair,mdtp", large_from="1GiB", sweep_tail="", sweep_depth="",
                              runs=1, capacity_seconds=0.0)
    plan = ms.Plan(args)
    assert len(plan.runs) == 6

    # six runs: three at the normal limit (140 Mbit/s), three where a replica dies (110), each with slack and its
    # overhead; then the testbed and the payload
    def one_run(mbit: float) -> float:
        return 64 * MiB * 8 / (mbit * 1e6) * ms.ESTIMATE_SLACK + ms.ESTIMATE_OVERHEAD_S + ms.SETTLE_S

    assert plan.estimate_s == pytest.approx(60.0 + 64 * MiB / 200e6 + 3 * one_run(140.0) + 3 * one_run(110.0))
    assert 60 < plan.estimate_s < 600  # about a minute and a half: what the plan says it will take


def row(competitor: str, wall: float, share: float, scenario: str = "normal", size: str = "256MiB") -> dict[str, Any]:
    return {"scenario": scenario, "size": size, "competitor": competitor, "median_wall_s": wall,
            "share_of_limit": share}


def test_the_targets_of_issue_14() -> None:
    rows = [row("aria2-fair", 20.0, 0.80), row("aria2-default", 30.0, 0.5), row("mdtp", 16.0, 0.98)]
    for r in rows:
        r["speedup_vs_fair"] = 20.0 / r["median_wall_s"]
        r["speedup_vs_default"] = 30.0 / r["median_wall_s"]
    runs = [{"ok": True, "scenario": "normal", "size": "256MiB", "competitor": "mdtp",
             "lnet": {"replicas": [{"bytes": 1}] * 6}}]
    checks = {c["target"]: c["met"] for c in ms.targets(rows, runs, 6, {"256MiB": 256 * MiB})}
    assert checks["mdtp never slower than aria2 fair (normal, 256MiB)"]
    assert checks["mdtp >= 1.15x aria2 fair, which reaches 80% of the limit (normal, 256MiB)"]  # 1.25x
    assert checks["mdtp >= 1.25x aria2 default (normal, 256MiB)"]  # 1.875x
    assert checks["mdtp >= 97% of the physical limit (normal, 256MiB)"]
    assert checks["mdtp uses every replica in every run (normal, 256MiB)"]
    assert checks["identical bytes in every run of every competitor"]
    rows[2]["median_wall_s"], rows[2]["share_of_limit"] = 21.0, 0.75
    rows[2]["speedup_vs_fair"], rows[2]["speedup_vs_default"] = 20 / 21, 30 / 21
    runs.append({"ok": False, "scenario": "normal", "size": "256MiB", "competitor": "aria2-fair"})
    missed = {c["target"] for c in ms.targets(rows, runs, 6, {"256MiB": 256 * MiB}) if not c["met"]}
    assert missed == {"mdtp never slower than aria2 fair (normal, 256MiB)",
                      "mdtp >= 1.15x aria2 fair, which reaches 80% of the limit (normal, 256MiB)",
                      "mdtp >= 97% of the physical limit (normal, 256MiB)",
                      "identical bytes in every run of every competitor"}


def test_the_round_trip_floor_of_one_replica_is_two_round_trips_then_the_file_at_its_payload_rate() -> None:
    feed = ms.Feed(first_byte_s=0.024, rate_mbit=40.0)
    assert ms.round_trip_floor_s(10 * 10**6, [feed], None, 1.0) == pytest.approx(0.024 + 80 / 40)
    assert ms.round_trip_floor_s(10 * 10**6, [feed], None, 0.5) == pytest.approx(0.024 + 80 / 20)
    assert ms.round_trip_floor_s(10 * 10**6, [feed], 20.0, 1.0) == pytest.approx(0.024 + 80 / 20)  # access cap


def test_the_round_trip_floor_counts_each_replica_from_its_first_byte_and_a_death() -> None:
    # 10 Mbit/s from 0.1 s, 30 from 0.5 s: 4 Mbit by 0.5 s, then 40 Mbit/s: 100 Mbit by 0.5 + 96/40 = 2.9 s
    feeds = [ms.Feed(0.1, 10.0), ms.Feed(0.5, 30.0)]
    assert ms.round_trip_floor_s(100 * 10**6 // 8, feeds, None, 1.0) == pytest.approx(2.9)
    # the second dies at 1.5 s: 4 + 40 = 44 Mbit by then, the other 56 at 10 Mbit/s: 7.1 s
    feeds[1] = feeds[1]._replace(change_s=1.5)
    assert ms.round_trip_floor_s(100 * 10**6 // 8, feeds, None, 1.0) == pytest.approx(7.1)
    with pytest.raises(ValueError, match="never deliver"):
        ms.round_trip_floor_s(100 * 10**6 // 8, [ms.Feed(0.1, 10.0, change_s=1.0)], None, 1.0)


def test_the_floor_on_the_replicas_testbed_where_r1_dies_at_half_time() -> None:
    tb = SimpleNamespace(topology=Topology.load(ms.TOPOLOGY))
    hosts = ["r1", "r2", "r3", "r4", "r5", "r6"]
    feeds = ms.replica_feeds(tb, hosts)
    assert [f.first_byte_s for f in feeds] == pytest.approx([0.024, 0.064, 0.124, 0.184, 0.244, 0.364])
    share = (9000 - 52) / 9000
    size = 64 * MiB
    normal = ms.run_floor_s(tb, feeds, hosts, size, None, None)
    # every replica at its rate from its first byte: the limit plus the bytes the round trips cost at 140 Mbit/s
    lost = sum(f.rate_mbit * f.first_byte_s for f in feeds)
    assert normal == pytest.approx((size * 8 / 1e6 / share + lost) / 140)
    dies = ms.run_floor_s(tb, feeds, hosts, size, ms.named_change("dies"), 1.92)
    r1 = 40 * (1.92 - 0.024)  # Mbit of link time before it dies; the other five carry the rest at 100 Mbit/s
    assert dies == pytest.approx((size * 8 / 1e6 / share - r1 + sum(f.rate_mbit * f.first_byte_s
                                                                    for f in feeds[1:])) / 100)
    # the limit is 4.60 s; the floor is above the 4.77 s that 1.15x aria2 fair's 5.49 s would ask for
    assert 4.77 < dies < 4.85
    ended_before = ms.run_floor_s(tb, feeds, hosts, size, ms.named_change("dies"), None)  # no change made
    assert ended_before == pytest.approx(normal)


def test_a_speedup_below_the_round_trip_floor_is_marked_unreachable() -> None:
    lnet = {"median_wall_s": 5.0, "round_trip_floor_s": 4.8, "speedup_vs_fair": 5.5 / 5.0}
    fair = {"median_wall_s": 5.5}
    check = ms.speedup_target("x", lnet, fair, "speedup_vs_fair", 1.15)
    assert not check["met"]
    assert not check["reachable"]
    assert "unreachable: 1.15x is 4.78 s, below the round-trip floor 4.80 s" in check["value"]
    fair["median_wall_s"] = 5.6  # 1.15x asks 4.87 s: above the floor, so only missed
    check = ms.speedup_target("x", lnet, fair, "speedup_vs_fair", 1.15)
    assert (check["met"], check["reachable"], check["value"]) == (False, True, "1.10x")


# -- random replica sets ---------------------------------------------------------------------------
def test_the_physical_limit_of_any_number_of_replicas() -> None:
    assert ms.limit_mbit([5.0, 10.0, 20.0], None) == 35.0
    assert ms.limit_mbit([5.0, 10.0, 20.0, 40.0, 1.0, 2.0, 3.0, 4.0], 60.0) == 60.0  # the access link caps it
    assert ms.limit_mbit([5.0, 10.0, 20.0], 60.0) == 35.0
    # a change a quarter of the way: a quarter of the file at 100, the rest at 50
    assert ms.changed_limit_mbit(100.0, 50.0, 0.25) == pytest.approx(1 / (0.25 / 100 + 0.75 / 50))
    assert ms.changed_limit_mbit(140.0, 110.0, 0.5) == pytest.approx(2 / (1 / 140 + 1 / 110))


@pytest.mark.parametrize("index", range(12))
def test_a_random_sets_limit_is_its_testbeds(index: int) -> None:
    rs = replica_set(11, index)
    tb = SimpleNamespace(topology=rs.topology())
    change = ms.set_change(rs)
    assert ms.set_limit_mbit(rs) == pytest.approx(ms.run_limit_mbit(tb, rs.hosts, change))
    before = min(sum(rs.rates_mbit.values()), rs.access_mbit)
    if change is None:
        assert ms.set_limit_mbit(rs) == pytest.approx(before)
        return
    after = min(sum(rs.rates_after_mbit().values()), rs.access_mbit)
    assert after <= before
    assert after - 1e-9 <= ms.set_limit_mbit(rs) <= before + 1e-9
    # the floor changes the same replica by the same factor at the time the change was made
    feeds = ms.replica_feeds(tb, rs.hosts)
    floor = ms.run_floor_s(tb, feeds, rs.hosts, 64 * MiB, change, 1.0)
    assert floor >= ms.run_floor_s(tb, feeds, rs.hosts, 64 * MiB, None, None)


def test_the_estimate_of_twelve_sets_at_64_mib_is_within_half_an_hour() -> None:
    sets = [replica_set(3, i) for i in range(12)]
    estimate = ms.random_estimate_s(sets, {"64MiB": 64 * MiB}, 2)
    per_run = sum(64 * MiB * 8 / (ms.set_limit_mbit(rs) * 1e6) * ms.ESTIMATE_SLACK for rs in sets) * 2 * 2
    assert estimate == pytest.approx(60 + 64 * MiB / 200e6 + 12 * ms.TESTBED_UP_S + per_run
                                     + 12 * 2 * 2 * (ms.ESTIMATE_OVERHEAD_S + ms.SETTLE_S))
    assert estimate < 30 * 60


def test_the_distribution_median_tenth_percentile_and_min() -> None:
    d = ms.distribution([1.3, 0.9, 1.2, 1.1, 1.0, 1.4, 1.5, 1.25, 1.05, 1.15, 1.35, 1.45])
    assert (d["n"], d["min"], d["max"]) == (12, 0.9, 1.5)
    assert d["median"] == pytest.approx((1.2 + 1.25) / 2)
    assert d["p10"] == 1.0  # nearest rank: the 2nd of 12
    assert ms.distribution([]) == {"n": 0, "median": None, "p10": None, "min": None, "max": None}


def run(index: int, competitor: str, wall: float, ok: bool = True, **extra: Any) -> dict[str, Any]:
    return {"set": index, "size": "64MiB", "competitor": competitor, "ok": ok, "wall_s": wall,
            "sent_bytes": 64 * MiB, "floor_s": 1.0, **extra}


def test_rows_their_distribution_and_issue_40s_targets() -> None:
    sets = [{"index": i, "kind": "steady", "hosts": ["r1", "r2", "r3"], "access_bottleneck": False,
             "limit_mbit": 8 * 64 * MiB / 1e6 / 4.0, "rates_mbit": {"r1": 10.0, "r2": 20.0, "r3": 10.0}}
            for i in range(3)]  # each set's limit: 4 s for the file
    report = {"replicas": [{"bytes": 1, "last_byte_s": 4.0, "share": 0.2}, {"bytes": 1, "last_byte_s": 4.5,
                                                                            "share": 0.6},
                           {"bytes": 1, "last_byte_s": 3.9, "share": 0.2}]}
    trace = [{"event": "request", "outcome": "done", "hedge": False}, {"event": "request", "outcome": "cancelled",
                                                                       "hedge": True}]
    runs = [run(0, "aria2-fair", 6.0), run(0, "mdtp", 5.0, lnet=report, trace=trace, own_s=4.8),
            run(0, "mdtp", 4.4), run(0, "mdtp", 7.0),
            run(1, "aria2-fair", 5.0), run(1, "mdtp", 5.0),
            run(2, "aria2-fair", 4.5), run(2, "mdtp", 5.0), run(2, "aria2-fair", 1.0, ok=False)]
    sizes = {"64MiB": 64 * MiB}
    rows = ms.random_rows(sets, runs, sizes)
    assert [r["lnet_over_fair"] for r in rows] == pytest.approx([6.0 / 5.0, 1.0, 0.9])
    assert [r["lnet_of_limit"] for r in rows] == pytest.approx([0.8, 0.8, 0.8])
    # the floor (1 s) is below the limit (4 s): the earliest any client could finish is the limit's 4 s
    assert [r["floor_over_fair"] for r in rows] == pytest.approx([6.0 / 4.0, 5.0 / 4.0, 4.5 / 4.0])
    assert [r["lnet_of_floor"] for r in rows] == pytest.approx([0.8, 0.8, 0.8])
    assert rows[2]["failed"] == 1
    tail = rows[0]["tail"]
    assert tail is not None  # the median lnet run (5.0 s) held its tail on r2, 0.5 s after r1
    assert (tail["replica"], tail["after_next_s"], tail["share"], tail["rate_share"]) == ("r2", pytest.approx(0.5),
                                                                                          0.6, 0.5)
    assert tail["requests"] == {"done": 1, "cancelled": 1}
    assert tail["hedges"] == 1
    assert tail["startup_s"] == pytest.approx(0.2)
    summary = ms.summarise_random(rows)
    assert summary["64MiB"]["lnet_over_fair"]["median"] == pytest.approx(1.0)
    assert summary["64MiB"]["lnet_over_fair"]["min"] == pytest.approx(0.9)
    median_check = ms.random_targets(summary, sizes, runs)[0]
    assert median_check["reachable"] is True  # a client at the floor would gain 1.25x at the median
    assert "floor: 1.25x" in median_check["value"]
    checks = {c["target"]: c["met"] for c in ms.random_targets(summary, sizes, runs)}
    assert checks == {"median lnet mdtp >= 1.15x aria2 fair (64MiB)": False,
                      "lnet mdtp never below 1.0x aria2 fair (64MiB)": False,
                      "median lnet mdtp >= 90% of the physical limit at 256MiB": None,
                      "identical bytes in every run of every competitor": False}
    large = {"256MiB": 256 * MiB}
    for r in rows:
        r["size"] = "256MiB"
    checks = {c["target"]: c["met"] for c in ms.random_targets(ms.summarise_random(rows), large, runs[:-1])}
    assert checks["median lnet mdtp >= 90% of the physical limit (256MiB)"] is False  # 80%
    assert checks["identical bytes in every run of every competitor"]
    for r in rows:  # where aria2 fair is as near the floor as 1.1x, a 1.15x target is out of any client's reach
        r["floor_over_fair"] = 1.1
    median_check = ms.random_targets(ms.summarise_random(rows), large, runs)[0]
    assert (median_check["met"], median_check["reachable"]) == (False, False)
    assert median_check["value"].endswith("1.10x (unreachable)")


def test_the_plot_is_a_cdf_per_ratio(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [{"size": "64MiB", "lnet_over_fair": 1.0 + i / 10, "lnet_of_limit": None, "fair_of_limit": None,
             "floor_over_fair": 1.2 + i / 10, "lnet_of_floor": None} for i in range(5)]
    ms.plot_random(rows, "test", tmp_path / "cdf.png")
    assert (tmp_path / "cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
