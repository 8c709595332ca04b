"""EdgeMemory: smoothing, failure, aging, the graph it hands out, persistence, seeding from depots' links."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from lnet.scheduler import THROUGHPUT, EdgeEstimate, EdgeMemory


def test_first_sample_is_the_estimate_and_later_ones_move_it_by_their_duration() -> None:
    memory = EdgeMemory(smoothing_s=2.0)
    assert memory.estimate("a", "b") is None
    memory.observe("a", "b", 1000, 1.0, now=10.0)
    assert memory.estimate("a", "b") == 1000.0
    short, long = EdgeMemory(smoothing_s=2.0), EdgeMemory(smoothing_s=2.0)
    for memory_ in (short, long):
        memory_.observe("a", "b", 1000, 1.0, now=10.0)
    short.observe("a", "b", 200, 0.1, now=11.0)  # 2000 B/s for 0.1 s
    long.observe("a", "b", 8000, 4.0, now=11.0)  # 2000 B/s for 4 s
    assert short.estimate("a", "b") == pytest.approx(1000 + 1000 * (1 - math.exp(-0.05)))
    assert long.estimate("a", "b") == pytest.approx(1000 + 1000 * (1 - math.exp(-2.0)))
    entry = long.entry("a", "b")
    assert entry is not None
    assert (entry.samples, entry.measured_at) == (2, 11.0)


def test_bad_measurements_are_refused() -> None:
    with pytest.raises(ValueError, match="seconds > 0"):
        EdgeMemory().observe("a", "b", 10, 0.0, now=0.0)
    with pytest.raises(ValueError, match="positive"):
        EdgeMemory(smoothing_s=0)


def test_a_failed_edge_weighs_zero_and_a_success_clears_it() -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 500, 1.0, now=0.0)
    memory.fail("a", "b", now=5.0)
    assert memory.estimate("a", "b") == 0.0
    assert memory.to_graph(["a", "b"]).edges["a", "b"][THROUGHPUT] == 0.0
    memory.observe("a", "b", 300, 1.0, now=6.0)
    assert memory.estimate("a", "b") == 300.0  # the failure's 0 is not averaged in


def test_to_graph_is_a_full_mesh_in_the_given_order_with_unknown_edges_bare() -> None:
    memory = EdgeMemory()
    memory.observe("b", "c", 100, 1.0, now=0.0)
    memory.observe("x", "y", 100, 1.0, now=0.0)  # outside the vertices asked for
    graph = memory.to_graph(["c", "b", "a"])
    assert list(graph.nodes) == ["c", "b", "a"]
    assert graph.number_of_edges() == 6
    assert graph.edges["b", "c"][THROUGHPUT] == 100.0
    assert THROUGHPUT not in graph.edges["c", "b"]


def test_aging_raises_the_oldest_stale_weights_a_bounded_number_at_a_time() -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 100, 1.0, now=0.0)
    memory.observe("a", "c", 100, 1.0, now=10.0)
    memory.observe("b", "c", 100, 1.0, now=20.0)
    memory.observe("c", "d", 100, 1.0, now=95.0)  # not stale yet at 100
    aged = memory.age_stale_weights(100.0, after_s=50.0, percent=20.0, max_edges=2)
    assert aged == [("a", "b"), ("a", "c")]
    assert memory.estimate("a", "b") == pytest.approx(120.0)
    assert memory.estimate("b", "c") == 100.0
    entry = memory.entry("a", "b")
    assert entry is not None
    assert entry.measured_at == 100.0
    # Next round: only b-c is still stale; a-b was renewed.
    assert memory.age_stale_weights(101.0, after_s=50.0, percent=20.0, max_edges=2) == [("b", "c")]
    assert memory.age_stale_weights(102.0, after_s=50.0, among={"a", "b"}) == []


def test_aging_is_kept_apart_from_the_measured_estimate_until_the_next_measurement() -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 100, 1.0, now=0.0)
    memory.age_stale_weights(10.0, after_s=5.0, percent=50.0)
    memory.age_stale_weights(20.0, after_s=5.0, percent=50.0)
    entry = memory.entry("a", "b")
    assert entry is not None
    assert entry.aged
    assert (entry.throughput_bps, entry.boost, entry.weight) == (100.0, 2.25, 225.0)
    assert memory.to_graph(["a", "b"]).edges["a", "b"][THROUGHPUT] == 225.0
    assert memory.to_graph(["a", "b"], with_aging=False).edges["a", "b"][THROUGHPUT] == 100.0
    memory.observe("a", "b", 200, 1.0, now=21.0)  # smoothed from the measured 100, not the aged 225
    entry = memory.entry("a", "b")
    assert entry is not None
    assert not entry.aged
    assert entry.weight == pytest.approx(100 + 100 * (1 - math.exp(-0.5)))


def test_aging_a_failed_edge_restores_its_old_weight_or_makes_it_unknown() -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 100, 1.0, now=0.0)
    memory.fail("a", "b", now=1.0)
    memory.fail("a", "c", now=1.0)  # never measured
    assert memory.age_stale_weights(5.0, after_s=1.0, percent=50.0, max_edges=5) == [("a", "b"), ("a", "c")]
    assert memory.estimate("a", "b") == pytest.approx(150.0)
    assert memory.estimate("a", "c") is None


def test_save_and_load_round_trip_atomically(tmp_path: Path) -> None:
    memory = EdgeMemory()
    memory.observe("ornl", "atlanta", 2_180_000, 1.0, now=1000.0)
    memory.fail("atlanta", "denver", now=1001.0)
    memory.observe("denver", "sunnyvale", 700_000, 1.0, now=0.0)
    memory.age_stale_weights(1002.0, after_s=1.0, percent=20.0, max_edges=1)  # ages denver-sunnyvale
    target = tmp_path / "deep" / "edges.json"
    memory.save(target)
    target.write_text("old contents are replaced, not appended to")
    memory.save(target)
    assert [p.name for p in target.parent.iterdir()] == ["edges.json"]  # no temporary left behind
    loaded = EdgeMemory.load(target)
    assert loaded.snapshot() == memory.snapshot()
    assert loaded.snapshot()[("atlanta", "denver")] == EdgeEstimate(0.0, 1001.0, 0, failed=True)


def test_overlaps_round_trip_are_found_beside_their_primary_and_age_out(tmp_path: Path) -> None:
    memory = EdgeMemory()
    memory.observe("s", "a", 1000, 1.0, now=0.0)
    memory.note_overlap(("s", "b", "d"), ("s", "a", "d"), 500.0, at=100.0)
    memory.note_overlap(("s", "d"), ("s", "a", "d"), 300.0, at=50.0)
    memory.note_overlap(("s", "d"), ("s", "a", "d"), 400.0, at=110.0)  # the pair's newer record replaces it
    memory.save(tmp_path / "edges.json")
    loaded = EdgeMemory.load(tmp_path / "edges.json")
    assert loaded.overlaps() == memory.overlaps()
    assert {(r.path, r.width_bps, r.at) for r in loaded.overlaps(["s", "a", "d"])} == {
        (("s", "b", "d"), 500.0, 100.0),
        (("s", "d"), 400.0, 110.0),
    }
    assert loaded.overlaps(["s", "d"]) == []
    assert [r.path for r in loaded.overlaps(["s", "a", "d"], now=405.0, max_age_s=300.0)] == [("s", "d")]
    loaded.age_stale_weights(405.0, after_s=300.0)  # aging forgets what is older than its horizon
    assert [r.path for r in loaded.overlaps()] == [("s", "d")]
    loaded.forget_overlap(("s", "d"))
    assert loaded.overlaps() == []
    with pytest.raises(ValueError, match="finite width"):
        loaded.note_overlap(("s", "d"), ("s", "a", "d"), math.nan, at=0.0)


def test_a_file_from_before_overlaps_loads_with_none(tmp_path: Path) -> None:
    path = tmp_path / "edges.json"
    path.write_text(json.dumps({"format": "lnet-edge-memory", "version": 2, "edges": [
        {"from": "a", "to": "b", "throughput_bps": 5.0, "measured_at": 1.0, "samples": 1, "failed": False}]}))
    memory = EdgeMemory.load(path)
    assert (memory.estimate("a", "b"), memory.overlaps()) == (5.0, [])
    memory.save(path)
    assert "overlaps" not in json.loads(path.read_text())  # an older lnet reads what this one writes


def test_a_missing_file_is_an_empty_memory_without_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert len(EdgeMemory.load(tmp_path / "absent.json")) == 0
    assert caplog.records == []


@pytest.mark.parametrize(
    "contents",
    [
        "{not json",
        json.dumps({"some": "other program's file"}),
        json.dumps({"format": "lnet-edge-memory", "version": 99, "edges": []}),
        json.dumps({"format": "lnet-edge-memory", "version": 1, "edges": [{"from": "a"}]}),
        '{"format": "lnet-edge-memory", "version": 1, "edges": [{"from": "a", "to": "b", "throughput_bps": NaN,'
        ' "measured_at": 0, "samples": 1, "failed": false}]}',
        json.dumps({"format": "lnet-edge-memory", "version": 1, "edges": "abc"}),
        json.dumps({"format": "lnet-edge-memory", "version": 2, "edges": [], "overlaps": [{"path": ["a"]}]}),
        json.dumps({"format": "lnet-edge-memory", "version": 2, "edges": [],
                    "overlaps": [{"path": ["a", "b"], "beside": ["a", "c", "b"], "width_bps": -1, "at": 0}]}),
    ],
)
def test_a_corrupt_or_foreign_file_is_reported_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, contents: str
) -> None:
    path = tmp_path / "edges.json"
    path.write_text(contents)
    with caplog.at_level(logging.WARNING, logger="lnet.scheduler"):
        memory = EdgeMemory.load(path)
    assert len(memory) == 0
    assert any("ignoring the edge memory" in r.getMessage() for r in caplog.records)


def test_clear_forgets_everything() -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 1, 1.0, now=0.0)
    memory.note_overlap(("a", "b"), ("a", "c", "b"), 1.0, at=0.0)
    memory.clear()
    assert len(memory) == 0
    assert memory.overlaps() == []
    assert memory.estimate("a", "b") is None


def test_default_path_is_in_the_user_cache_directory() -> None:
    path = EdgeMemory.default_path()
    assert path.name == "edges.json"
    assert "lnet" in path.parent.parts[-2:] or path.parent.name == "lnet"


def test_seed_from_links_learns_known_peers_and_skips_the_rest() -> None:
    memory = EdgeMemory()
    memory.observe("atl", "den", 999, 1.0, now=500.0)  # fresher than its link below
    links = [
        {"to": "http://10.0.0.2:6714", "bytes": 4_000_000, "seconds": 2.0, "mbps": 16.0, "at": 100.0},
        {"to": "http://10.0.0.3:6714/", "bytes": 1_000, "seconds": 1.0, "mbps": 0.008, "at": 400.0},
        {"to": "http://10.0.0.9:6714", "bytes": 1_000, "seconds": 1.0, "mbps": 0.008, "at": 100.0},  # unknown
        {"to": "http://10.0.0.2:6714", "bytes": "lots", "seconds": 1.0, "mbps": 1.0, "at": 100.0},  # malformed
        "not even a dict",
    ]
    urls = {"http://10.0.0.2:6714/": "ind", "http://10.0.0.3:6714": "den"}
    learnt = memory.seed_from_links("atl", links, urls, now=1000.0)  # type: ignore[arg-type]
    assert learnt == [("atl", "ind")]
    assert memory.estimate("atl", "ind") == 2_000_000.0
    assert memory.estimate("atl", "den") == 999.0


def test_seed_from_links_clamps_a_future_time_to_now() -> None:
    memory = EdgeMemory()
    links = [{"to": "http://b", "bytes": 10, "seconds": 1.0, "mbps": 0.0, "at": 5000.0}]
    assert memory.seed_from_links("a", links, {"http://b": "b"}, now=1000.0) == [("a", "b")]
    entry = memory.entry("a", "b")
    assert entry is not None
    assert entry.measured_at == 1000.0


def test_seed_from_links_takes_per_stream_weather_and_skips_small_pushes_and_failures() -> None:
    memory = EdgeMemory()
    urls = {"http://den:6714": "den", "http://kc:6714": "kc", "http://ind:6714": "ind"}
    links = [
        # Three pushes of 4 MiB, 2 s of push time in all: 6 MiB/s a stream, whatever ran beside them.
        {"to": "http://den:6714", "source": "copy", "bytes": 12 * 2**20, "seconds": 2.0, "at": 900.0,
         "streams": 2.0, "block_bytes": 4 * 2**20, "count": 3},
        # Probes of 64 KiB are mostly slow start: not learnt.
        {"to": "http://kc:6714", "source": "probe", "bytes": 2**17, "seconds": 0.5, "at": 900.0,
         "block_bytes": 2**16, "count": 2},
        # A peer that only ever failed: no rate to learn.
        {"to": "http://ind:6714", "source": "probe", "bytes": 0, "seconds": 0.0, "at": None, "count": 0,
         "failures": 3, "error": "connection refused"},
    ]
    assert memory.seed_from_links("atl", links, urls, now=1000.0) == [("atl", "den")]
    assert memory.estimate("atl", "den") == 6 * 2**20


def test_seed_from_links_with_the_depth_rule_weighs_the_pushes_that_ran_not_the_most_a_hop_may_run() -> None:
    # A transfer that keeps 2 to 16 blocks a hop: a weight is what a hop carried at its own depth, spread over 16.
    urls = {"http://den:6714": "den", "http://kc:6714": "kc"}
    links = [
        # One push at a time, 1 MiB/s: one stream's worth (a floor), two streams' worth its ceiling.
        {"to": "http://den:6714", "bytes": 4 * 2**20, "seconds": 4.0, "at": 900.0, "streams": 1.0},
        # Four at once, 1 MiB/s each: four streams' worth, no ceiling above it. Old depots do not say: one.
        {"to": "http://kc:6714", "bytes": 4 * 2**20, "seconds": 4.0, "at": 900.0, "streams": 4.0},
    ]
    memory = EdgeMemory()
    assert memory.seed_from_links("atl", links, urls, now=1000.0, depth=(2, 16)) == [("atl", "den"), ("atl", "kc")]
    den, kc = memory.entry("atl", "den"), memory.entry("atl", "kc")
    assert den is not None
    assert kc is not None
    assert den.throughput_bps == pytest.approx(2**20 / 16)  # x 16 in the graph: 1 MiB/s, not 16
    assert den.ceiling_bps == pytest.approx(2 * 2**20 / 16)
    assert kc.throughput_bps == pytest.approx(4 * 2**20 / 16)
    assert kc.ceiling_bps is None
    plain = EdgeMemory()  # a fixed number a hop: the per-stream rate, as before
    plain.seed_from_links("atl", links, urls, now=1000.0)
    assert plain.estimate("atl", "den") == 2**20


def test_a_ceiling_marks_a_floor_until_a_sample_without_one(tmp_path: Path) -> None:
    memory = EdgeMemory()
    memory.observe("a", "b", 100, 1.0, 0.0, ceiling_bps=250.0)
    entry = memory.entry("a", "b")
    assert entry is not None
    assert entry.ceiling_bps == 250.0
    # Saved and loaded with the floor it marks; a file without the field loads with none.
    memory.save(tmp_path / "edges.json")
    assert EdgeMemory.load(tmp_path / "edges.json").entry("a", "b") == entry
    # A ceiling at or below the estimate says nothing; the transfer's own sample (none) clears it.
    memory.observe("a", "b", 100, 1.0, 1.0, ceiling_bps=50.0)
    assert memory.entry("a", "b").ceiling_bps is None  # type: ignore[union-attr]
    memory.observe("a", "b", 100, 1.0, 2.0, ceiling_bps=300.0)
    memory.observe("a", "b", 200, 1.0, 3.0)
    assert memory.entry("a", "b").ceiling_bps is None  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="ceiling"):
        memory.observe("a", "b", 100, 1.0, 4.0, ceiling_bps=math.nan)
    # A failure clears it; aging keeps it.
    memory.observe("c", "d", 100, 1.0, 0.0, ceiling_bps=250.0)
    memory.age_stale_weights(1000.0, after_s=10.0, percent=20.0, max_edges=5)
    assert memory.entry("c", "d").ceiling_bps == 250.0  # type: ignore[union-attr]
    memory.fail("c", "d", 1001.0)
    assert memory.entry("c", "d").ceiling_bps is None  # type: ignore[union-attr]
