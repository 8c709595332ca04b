"""The transfer's candidates on an overlay larger than it can explore (theory of operation, 15): at most
``max_depots`` depots, the destination always, the ways the memory knows first, then the best placed by round
trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.scheduler._candidates import candidates

MB = 1_000_000


def overlay(depots: int) -> list[str]:
    return ["src", *(f"d{i:02d}" for i in range(depots)), "dst"]


def test_an_overlay_within_the_limit_is_kept_whole_and_in_its_order() -> None:
    vertices = ["a", "src", "b", "dst", "c"]
    assert candidates(vertices, "src", "dst", EdgeMemory(), {}, 4) == tuple(vertices)
    assert candidates([*vertices, "a"], "src", "dst", EdgeMemory(), {}, 4) == tuple(vertices)  # repeats dropped


def test_the_depots_placed_half_way_by_round_trip_are_kept_before_those_behind_the_source_or_past_the_end() -> None:
    vertices = ["src", "behind", "past", "near", "half", "dst"]
    rtt = {"behind": 0.150, "past": 0.160, "near": 0.010, "half": 0.045, "dst": 0.080}
    # legs as the priors bound them: half 45/35 (45), near 10/70 (70), past 160/80 (160), behind 150/70 (150)
    assert candidates(vertices, "src", "dst", EdgeMemory(), rtt, 3) == ("src", "near", "half", "dst")
    assert candidates(vertices, "src", "dst", EdgeMemory(), rtt, 2) == ("src", "half", "dst")
    assert candidates(vertices, "src", "dst", EdgeMemory(), rtt, 1) == ("src", "dst")


def test_depots_without_a_round_trip_come_last_in_the_overlay_order() -> None:
    vertices = ["src", "x", "y", "z", "dst"]
    assert candidates(vertices, "src", "dst", EdgeMemory(), {"z": 0.04, "dst": 0.08}, 3) == ("src", "x", "z", "dst")


def test_a_remembered_way_is_kept_however_far_its_depots_look_by_round_trip() -> None:
    vertices = overlay(8)
    rtt = {name: 0.040 for name in vertices[1:]} | {"d07": 0.300, "d06": 0.290}
    memory = EdgeMemory()
    memory.observe("src", "d07", 50 * MB, 1.0, 0.0)
    memory.observe("d07", "d06", 40 * MB, 1.0, 0.0)
    memory.observe("d06", "dst", 60 * MB, 1.0, 0.0)
    memory.observe("src", "d05", 90 * MB, 1.0, 0.0)  # a measured way in, none on: not a way through
    kept = candidates(vertices, "src", "dst", memory, rtt, 4)
    assert {"d07", "d06", "dst"} <= set(kept)
    assert len(kept) == 5
    memory.fail("d06", "dst", 1.0)  # a failed edge is no way
    assert not {"d07", "d06"} & set(candidates(vertices, "src", "dst", memory, rtt, 4))


def test_the_memory_takes_at_most_three_quarters_of_the_places() -> None:
    vertices = overlay(12)
    memory = EdgeMemory()
    for i in range(8):  # eight remembered one-depot ways, d00 the widest
        memory.observe("src", f"d{i:02d}", (100 - i) * MB, 1.0, 0.0)
        memory.observe(f"d{i:02d}", "dst", (100 - i) * MB, 1.0, 0.0)
    rtt = {name: 0.040 for name in vertices[1:]} | {"d11": 0.030}
    kept = candidates(vertices, "src", "dst", memory, rtt, 5)  # 4 places beside dst: 3 remembered, 1 by rtt
    assert kept == ("src", "d00", "d01", "d02", "d11", "dst")


@given(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=60),
       st.lists(st.floats(min_value=0.001, max_value=0.5), min_size=61, max_size=61))
def test_any_overlay_keeps_the_ends_and_at_most_the_limit(limit: int, depots: int, rtts: list[float]) -> None:
    vertices = overlay(depots)
    rtt = dict(zip(vertices[1:], rtts, strict=False))
    kept = candidates(vertices, "src", "dst", EdgeMemory(), rtt, limit)
    assert kept[0] == "src"
    assert "dst" in kept
    assert len(kept) == min(len(vertices), limit + 1)
    assert list(kept) == [v for v in vertices if v in kept]  # the overlay's order


def test_the_scheduler_explores_its_candidates_only() -> None:
    vertices = overlay(60)
    rtt = {name: 0.040 + 0.001 * i for i, name in enumerate(vertices[1:])}
    s = PathScheduler(vertices, "src", "dst", EdgeMemory(), SchedulerConfig(max_depots=10), rtt_s=rtt)
    assert len(s.vertices) == 11
    assert {"src", "dst"} <= set(s.vertices)
    decision = s.start(0.0)
    assert decision.probes
    assert {v for edge in decision.probes for v in edge} <= set(s.vertices)
    everything = PathScheduler(vertices, "src", "dst", EdgeMemory(), SchedulerConfig(max_depots=None), rtt_s=rtt)
    assert everything.vertices == tuple(vertices)
    assert SchedulerConfig().max_depots == 32
    with pytest.raises(ValueError, match="max_depots"):
        SchedulerConfig(max_depots=0)
