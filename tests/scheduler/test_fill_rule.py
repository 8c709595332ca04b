"""The fill rule: with the block size and the bytes left, a path new to the set is taken only when its first copies
would reach the destination before the set, without it, delivers what is left (``SchedulerConfig.block_bytes``,
``Progress``; docs/decisions/0020)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx
import pytest

from lnet.scheduler import (
    THROUGHPUT,
    EdgeMemory,
    HopFailure,
    Keep,
    PathScheduler,
    Progress,
    SchedulerConfig,
    Switch,
)
from lnet.scheduler._paths import fill_s
from lnet.scheduler._widest import edges_of
from lnet.scheduler.simulator import simulate_transfer

from .test_multipath import HAND, VERTICES, VIA_A, VIA_B, feed, known, learn_b
from .test_sim_blocks import MiB, Recording, network

BLOCK = 100
"""Bytes a block: with the hand-made memories' rates (VIA_A 100 bytes/s, VIA_B 90 at one stream), the path through
b fills in 2 x 100 / 90 = 2.2 s, and the set through a delivers 100 bytes/s."""
FILLING = replace(HAND, block_bytes=BLOCK)


def test_a_path_fills_in_its_hops_first_copies_times_and_an_unknown_hop_counts_as_instant() -> None:
    graph = nx.DiGraph()
    graph.add_edge("s", "a", **{THROUGHPUT: 8e6})
    graph.add_edge("a", "d", **{THROUGHPUT: 4e6})
    graph.add_edge("s", "b")  # not measured
    graph.add_edge("b", "d", **{THROUGHPUT: 1e6})
    # four copies of 1 MB share each hop's rate, one hop after the other
    assert fill_s(graph, ("s", "a", "d"), 4, 10**6) == pytest.approx(4 / 8 + 4 / 4)
    assert fill_s(graph, ("s", "b", "d"), 2, 10**6) == pytest.approx(2.0)
    assert fill_s(graph, ("s", "d"), 4, 10**6) == 0.0  # no such edge: nothing known of it


@pytest.mark.parametrize(("left", "joins"), [(1000, True), (300, True), (200, False), (50, False)])
def test_a_disjoint_path_joins_only_when_it_fills_before_the_set_would_end_without_it(left: int, joins: bool) -> None:
    # The set through a ends what is left in left / 100 s; the path through b fills in 2.2 s.
    memory = known(s_a=100, a_d=100)
    scheduler = PathScheduler(VERTICES, "s", "d", memory, FILLING)
    scheduler.start(0.0)
    feed(scheduler, {VIA_A: 100}, 0.0, 10.0)
    learn_b(memory)
    scheduler.measure(Progress(left, 9.5))
    decision = scheduler.tick(10.0)
    assert scheduler.left_bytes == left
    if joins:
        assert isinstance(decision, Switch)
        assert (decision.reason, decision.all_paths) == ("join", (VIA_A, VIA_B))
    else:
        assert decision == Keep(VIA_A, paths=(VIA_A,), rates=(100.0,))


@pytest.mark.parametrize(
    "config", [HAND, replace(HAND, block_bytes=None)], ids=["no-block-size", "block-size-none"]
)
def test_without_the_block_size_or_the_bytes_left_the_rule_is_off(config: SchedulerConfig) -> None:
    memory = known(s_a=100, a_d=100)
    scheduler = PathScheduler(VERTICES, "s", "d", memory, config)
    scheduler.start(0.0)
    feed(scheduler, {VIA_A: 100}, 0.0, 10.0)
    learn_b(memory)
    scheduler.measure(Progress(1, 9.5))  # one byte left: the rule would keep anything out
    assert scheduler.tick(10.0).all_paths == (VIA_A, VIA_B)
    told_nothing = PathScheduler(VERTICES, "s", "d", known(s_a=100, a_d=100), FILLING)
    told_nothing.start(0.0)
    feed(told_nothing, {VIA_A: 100}, 0.0, 10.0)
    learn_b(told_nothing.memory)
    assert told_nothing.left_bytes is None
    assert told_nothing.tick(10.0).all_paths == (VIA_A, VIA_B)


SINGLE = replace(FILLING, max_paths=1)


@pytest.mark.parametrize(("left", "moves"), [(1000, True), (50, False)])
def test_the_primary_moves_to_a_wider_path_only_when_that_path_fills_in_time(left: int, moves: bool) -> None:
    # Through b at 300 bytes/s fills in 2 x 100 / 300 = 0.67 s; the path through a ends 50 bytes in 0.5 s.
    memory = known(s_a=100, a_d=100)
    scheduler = PathScheduler(VERTICES, "s", "d", memory, SINGLE)
    assert scheduler.start(0.0).path == VIA_A
    feed(scheduler, {VIA_A: 100}, 0.0, 10.0)
    learn_b(memory, 300.0)
    scheduler.measure(Progress(left, 9.5))
    decision = scheduler.tick(10.0)
    if moves:
        assert isinstance(decision, Switch)
        assert (decision.path, decision.reason) == (VIA_B, "better")
    else:
        assert decision == Keep(VIA_A)


@pytest.mark.parametrize(("left", "moves"), [(1000, True), (50, False)])
def test_an_early_move_waits_for_no_trial_but_for_the_fill_rule(left: int, moves: bool) -> None:
    # With probes the loop moves before min_attempt_s onto a measured path early_gain wider (here at 5 s).
    probing = replace(SINGLE, probes_per_round=4)
    memory = known(s_a=100, a_d=100)
    scheduler = PathScheduler(VERTICES, "s", "d", memory, probing)
    assert scheduler.start(0.0).path == VIA_A
    feed(scheduler, {VIA_A: 100}, 0.0, 5.0)
    learn_b(memory, 300.0, at=4.0)
    scheduler.measure(Progress(left, 4.5))
    decision = scheduler.tick(5.0)
    assert scheduler.attempts[0].start == 0.0
    if moves:
        assert isinstance(decision, Switch)
        assert (decision.path, decision.reason) == (VIA_B, "better")
    else:
        assert isinstance(decision, Keep)
        assert decision.path == VIA_A


def test_a_failure_moves_the_transfer_however_little_is_left() -> None:
    memory = known(s_a=100, a_d=100, s_b=90, b_d=90)
    scheduler = PathScheduler(VERTICES, "s", "d", memory, SINGLE)
    assert scheduler.start(0.0).path == VIA_A
    feed(scheduler, {VIA_A: 100}, 0.0, 4.0)
    scheduler.measure(Progress(10, 4.0))
    scheduler.measure(HopFailure(("a", "d"), 4.0))
    decision = scheduler.tick(4.5)
    assert isinstance(decision, Switch)
    assert decision.reason == "failure"
    assert ("a", "d") not in edges_of(decision.path)


def test_a_warm_start_joins_only_the_paths_that_fill_before_the_file_would_be_through() -> None:
    # The memory predicts both routes. A 150-byte file goes through a in 1.5 s, before b's 2.2-s fill ends: b
    # stays out. A 1000-byte file takes 10 s: b joins from the first second.
    for size, paths in ((150, (VIA_A,)), (1000, (VIA_A, VIA_B))):
        scheduler = PathScheduler(VERTICES, "s", "d", known(s_a=100, a_d=100, s_b=90, b_d=90), FILLING)
        scheduler.measure(Progress(size, 0.0))
        assert scheduler.start(0.0).all_paths == paths


def test_progress_and_the_config_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="negative"):
        Progress(-1, 0.0)
    with pytest.raises(ValueError, match="block_bytes"):
        SchedulerConfig(block_bytes=0)
    with pytest.raises(ValueError, match="first_depth"):
        SchedulerConfig(first_depth=0)


def test_the_simulator_tells_a_sized_transfer_s_scheduler_the_bytes_left_each_step() -> None:
    net = network(40.0, 10.0)
    size = 64 * MiB
    scheduler = Recording(net.vertices, "src", "dst", EdgeMemory(), replace(SchedulerConfig(), block_bytes=MiB))
    result = simulate_transfer(net, scheduler, duration_s=60.0, step_s=0.5, block_bytes=MiB, size_bytes=size)
    assert result.finished_at is not None
    lefts = [event.left for event in scheduler.events if isinstance(event, Progress)]
    assert len(lefts) == len(result.samples) - 1  # before every tick: the last step ends the transfer, no tick
    assert lefts[0] <= size
    assert all(later <= earlier for earlier, later in itertools.pairwise(lefts))
    assert lefts[-1] < size // 4
    unsized = Recording(net.vertices, "src", "dst", EdgeMemory(), SchedulerConfig())
    simulate_transfer(net, unsized, duration_s=10.0, step_s=0.5, block_bytes=MiB)
    assert not any(isinstance(event, Progress) for event in unsized.events)
