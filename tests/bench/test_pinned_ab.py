"""bench/pinned_ab.py's arguments and its summary (the runs themselves need root: the testbed)."""

from __future__ import annotations

import pytest

from .benches import load_bench

ab = load_bench("pinned_ab")


def test_paths_name_a_scenario_and_the_hops_after_the_source() -> None:
    args = ab.parse_args(["--a", "/x/python", "--runs", "2", "7:1:dst", "7:1:d04,d02,dst"])
    assert args.items == [(7, 1, "dst"), (7, 1, "d04,d02,dst")]
    assert args.size_bytes == 96 * 2**20


@pytest.mark.parametrize("argv", [["--a", "p", "7:dst"], ["--a", "p", "x:1:dst"],
                                  ["--a", "p", "--runs", "0", "7:1:dst"], ["7:1:dst"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        ab.parse_args(argv)


def test_the_summary_is_each_path_and_side_over_its_finished_runs() -> None:
    rows = [{"seed": 7, "index": 1, "path": "dst", "side": side, "ok": ok, "mbps": mbps}
            for side, ok, mbps in (("A", True, 5.0), ("A", True, 7.0), ("A", False, None), ("B", True, 9.0))]
    assert ab.medians(rows) == [
        {"seed": 7, "index": 1, "path": "dst", "side": "A", "runs": 2, "median_mbps": 6.0, "least_mbps": 5.0,
         "most_mbps": 7.0},
        {"seed": 7, "index": 1, "path": "dst", "side": "B", "runs": 1, "median_mbps": 9.0, "least_mbps": 9.0,
         "most_mbps": 9.0},
    ]
