"""Deep probes (theory of operation, 13): an edge known only from a one-stream probe is probed again with more
copies at once when ``streams`` of that stream would make its path the best, so that a detour held back by its
streams' windows (or loss), which one stream cannot tell from a narrow link, is found."""

from __future__ import annotations

from typing import Any

from lnet.scheduler import (
    Decision,
    DropDepot,
    EdgeMemory,
    Measurement,
    PathScheduler,
    ProbeDone,
    SchedulerConfig,
)
from lnet.scheduler.simulator import SimResult, mbit, simulate_pinned, simulate_transfer, window_detour

CHAIN = ("src", "d", "dst")
DIRECT = ("src", "dst")


def config(*, deep: bool = True) -> SchedulerConfig:
    """lnet-send's defaults: 16 copies a hop at most, 2 at least (bench/scheduler.py's send_config)."""
    return SchedulerConfig(streams=16, min_streams=2, deep_probes=deep)


class Recording(PathScheduler):
    """The scheduler, keeping every edge it asked to probe deep, and every edge a path of its set has crossed."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.deep: set[tuple[str, str]] = set()
        self.used: set[tuple[str, str]] = set()

    def tick(self, now: float) -> Decision:
        decision = super().tick(now)
        if not isinstance(decision, DropDepot):
            self.deep |= set(decision.deep)
        self.used |= {edge for path in decision.all_paths for edge in zip(path, path[1:], strict=False)}
        return decision


def cold(network, *, deep: bool = True, duration_s: float = 120.0) -> tuple[SimResult, Recording]:  # type: ignore[no-untyped-def]
    memory = EdgeMemory()
    scheduler = Recording(network.vertices, "src", "dst", memory, config(deep=deep), rtt_s=network.rtts_from("src"))
    result = simulate_transfer(network, scheduler, duration_s=duration_s, step_s=1.0, depth="adaptive", min_depth=2,
                               seed=1)
    return result, scheduler


def test_a_detour_held_back_by_its_windows_is_found_by_deep_probes() -> None:
    network = window_detour()
    chain = simulate_pinned(network, [CHAIN], streams=16, duration_s=60, step_s=1.0, depth="adaptive").mean_rate(20)
    direct = simulate_pinned(network, [DIRECT], streams=16, duration_s=60, step_s=1.0, depth="adaptive").mean_rate(20)
    assert chain > 1.8 * direct  # the chain is the best path by far, at 16 streams
    result, scheduler = cold(network)
    assert scheduler.deep == {("src", "d"), ("d", "dst")}
    assert result.final_paths == (CHAIN,)
    reached = result.first_time_at(0.9 * chain)
    assert reached is not None
    assert reached <= 30
    assert result.mean_rate(60) >= 0.9 * chain
    # One stream a probe (before 2026-11-28): the detour's hops read 13 Mbit/s against direct's 110 and the chain is
    # never tried.
    old, _ = cold(network, deep=False)
    assert old.final_paths == (DIRECT,)
    assert result.mean_rate(60) > 1.8 * old.mean_rate(60)


def test_no_deep_probe_where_sixteen_streams_could_not_beat_the_path() -> None:
    # Detour links of 5 Mbit/s: one stream fills them, and even 16 of it (80) would not beat direct's 110.
    result, scheduler = cold(window_detour(detour_mbit=5.0), duration_s=60.0)
    assert result.final_paths == (DIRECT,)
    assert not scheduler.deep
    for edge in (("src", "d"), ("d", "dst")):
        assert scheduler.memory.entry(*edge) is not None  # probed, one stream each


def test_a_deep_probes_figure_is_the_edges_own_with_no_ceiling() -> None:
    memory = EdgeMemory()
    scheduler = PathScheduler(("src", "d", "dst"), "src", "dst", memory, config())
    first = scheduler.start(0.0)
    assert first.path == DIRECT
    assert set(first.probes) <= {("src", "d"), ("d", "dst")}
    # The direct path runs at 16 streams of 6.9 Mbit/s; one-stream probes read 13 on each of the detour's hops.
    for t in range(1, 12):
        scheduler.measure(Measurement(DIRECT, round(mbit(110)), 16.0, float(t), 16.0, began=t - 1.0))
        for edge in first.probes:
            if t <= 4:
                scheduler.measure(Measurement(edge, round(mbit(13)), 1.0, float(t), 1.0, began=t - 1.0))
        if t == 4:
            for edge in first.probes:
                scheduler.measure(ProbeDone(edge, float(t)))
        decision = scheduler.tick(float(t))
        if decision.probes:
            break
    assert decision.deep, decision  # the detour could win at 16 streams: its hops are probed deep
    edge = decision.deep[0]
    entry = memory.entry(*edge)
    assert entry is not None
    assert entry.ceiling_bps is not None
    scheduler.measure(Measurement(edge, round(mbit(210)), 16.0, 12.0, 16.0, began=11.0))
    entry = memory.entry(*edge)
    assert entry is not None
    assert entry.ceiling_bps is None
    weight = scheduler.graph().edges[edge]["throughput"]  # per-stream figures x streams
    assert weight > mbit(180)  # 16 streams' worth (210), not one (13)


def test_a_deep_probe_on_a_full_link_reports_the_depth_it_ran_at() -> None:
    # Detour links of 60 Mbit/s: one stream gets 13.1, sixteen would get 210 if the links held them, so the detour's
    # hops are probed deep; five copies fill a link, and the probe runs about that many. In the engine's sampling
    # (a probe reports when it ends) its figure must say so: saying the sixteen asked for made each hop read
    # 60 x 16/5 = 192 Mbit/s, above direct's 110, until the transfer tried the chain (docs/decisions/0009).
    network = window_detour(detour_mbit=60.0, noise=0.0)
    scheduler = Recording(network.vertices, "src", "dst", EdgeMemory(), config(), rtt_s=network.rtts_from("src"))
    read: list[tuple[Measurement, float]] = []
    """Each deep probe's figure, with the edge's weight right after the scheduler heard it."""
    measure = scheduler.measure

    def keep(event: object) -> None:
        measure(event)  # type: ignore[arg-type]
        if isinstance(event, Measurement) and event.edge in scheduler.deep and event.edge not in scheduler.used:
            read.append((event, scheduler.graph().edges[event.edge]["throughput"]))

    scheduler.measure = keep  # type: ignore[method-assign]
    result = simulate_transfer(network, scheduler, duration_s=90.0, step_s=0.25, depth="adaptive", min_depth=2,
                               seed=1, block_bytes=4 * 1024 * 1024)
    assert scheduler.deep == {("src", "d"), ("d", "dst")}
    assert read
    for sample, weight in read:
        assert sample.streams is not None
        assert 1 < sample.streams < 16
        assert weight < 1.15 * mbit(60)
    assert result.final_paths == (DIRECT,)
