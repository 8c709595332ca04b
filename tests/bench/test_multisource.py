"""The multi-source benchmark's pure parts: the competitors' command lines, the sweeps, the scenarios' physical
limits, the estimate and issue 14's targets. (The benchmark itself needs root and the testbed:
bench/multisource.py, docs/client.md.)"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from lnet.testbed.topology import Topology

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multisource", REPO / "bench" / "multisource.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["multisource"] = module
    spec.loader.exec_module(module)
    return module


ms = load_bench()
TOOLS = {"aria2c": "/usr/bin/aria2c", "nginx": "/usr/sbin/nginx"}
URLS = ["http://10.0.0.2:8080/f", "http://10.0.0.3:8080/f"]


def test_aria2_fair_and_default_differ_only_by_the_fair_flags(tmp_path: Path) -> None:
    out = tmp_path / "downloads" / "x.bin"
    fair = ms.competitor_argv("aria2-fair", URLS, out, "ab" * 32, TOOLS, Path("lnet-get"), [])
    default = ms.competitor_argv("aria2-default", URLS, out, "ab" * 32, TOOLS, Path("lnet-get"), [])
    assert [a for a in fair if a not in ms.ARIA2_FAIR] == default
    assert "--split=6" in fair
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
    assert ms.scenario_limit_mbit(tb, "normal", hosts, 40.0) == pytest.approx(140.0)
    assert ms.scenario_limit_mbit(tb, "slowdown", hosts, 40.0) == pytest.approx(2 / (1 / 140 + 1 / 110))
    assert ms.scenario_limit_mbit(tb, "dies", hosts, 40.0) == pytest.approx(2 / (1 / 140 + 1 / 100))


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
