"""The demo's comparison of its three runs (pure: no testbed, no root)."""

from __future__ import annotations

from typing import Any

from lnet.testbed.demo import DemoResult, comparison, verdict

CHAIN = ["ornl", "atl", "ind", "kc", "den", "svl"]


def run(name: str, seconds: float, mbps: float, attempts: list[tuple[list[str], float, float, float]]) -> DemoResult:
    summary: dict[str, Any] = {
        "seconds": seconds, "mbps": mbps, "path": attempts[-1][0],
        "path_attempts": [{"path": p, "start": a, "end": b, "bytes": 0, "mbps": r, "reason": "x"}
                          for p, a, b, r in attempts],
    }
    return DemoResult(name, summary)


RESULTS = [
    run("direct", 80.0, 5.0, [(["ornl", "svl"], 0.0, 80.0, 5.0)]),
    run("cold", 50.0, 8.0, [(["ornl", "svl"], 0.0, 12.5, 4.5), (CHAIN, 12.5, 50.0, 9.5)]),
    run("warm", 40.0, 10.0, [(CHAIN, 0.0, 40.0, 10.0)]),
]


def test_every_path_of_every_run_with_its_time_and_the_ratio_to_direct() -> None:
    lines = comparison(RESULTS)
    assert lines[0].split()[:4] == ["run", "seconds", "Mbit/s", "x"]
    assert lines[1].split() == ["direct", "80.0", "5.00", "1.00", "ornl", "->", "svl", "80.0", "s", "5.00"]
    assert lines[2].split() == ["cold", "50.0", "8.00", "1.60", "ornl", "->", "svl", "12.5", "s", "4.50"]
    assert lines[3].split() == [*" -> ".join(CHAIN).split(), "37.5", "s", "9.50"]  # the cold run's second path
    assert lines[4].split()[:4] == ["warm", "40.0", "10.00", "2.00"]
    assert len(lines) == 5
    assert len({line.index("ornl") for line in lines[1:]}) == 1  # the paths line up


def test_the_last_line_states_warm_over_direct() -> None:
    assert verdict(RESULTS) == ("warm start / pinned direct = 2.00 (10.00 against 5.00 Mbit/s; the warm start "
                                "ended on ornl -> atl -> ind -> kc -> den -> svl)")
