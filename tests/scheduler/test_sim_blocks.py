"""The simulator's samples with ``block_bytes``: a hop reports when a copy ends, as the relay's engine does, not every
step, and a probe runs as ``EdgeProbes.one_stream`` does (its time and two copies, cut off at twice its time). The
fluid model (a sample every step) let a slow first path report in one step; on the testbed its first learnt copy
came many seconds later, and the simulator agreed with the testbed only once it modelled that."""

from __future__ import annotations

from lnet.scheduler import EdgeMemory, Measurement, PathScheduler, ProbeDone, SchedulerConfig
from lnet.scheduler.simulator import SimNetwork, mbit, simulate_transfer

MiB = 1024 * 1024
DIRECT = ("src", "dst")


class Recording(PathScheduler):
    """A scheduler that keeps every event the simulator gave it, with the time of the tick after it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.events: list[object] = []

    def measure(self, event: object) -> None:  # type: ignore[override]
        self.events.append(event)
        super().measure(event)  # type: ignore[arg-type]


def network(direct_mbit: float, other_mbit: float, *, depot: bool = True) -> SimNetwork:
    """Per-stream rates: direct's, and every other edge's."""
    vertices = ("src", "d1", "dst") if depot else ("src", "dst")
    capacities = {(u, v): mbit(other_mbit) for u in vertices for v in vertices if u != v}
    capacities[DIRECT] = mbit(direct_mbit)
    return SimNetwork(vertices, capacities, default_ramp_s=0.0, noise=0.0)


def run(net: SimNetwork, block: int | None, **config: object) -> Recording:
    settings = SchedulerConfig(streams=2, min_streams=2, **config)  # type: ignore[arg-type]
    scheduler = Recording(net.vertices, "src", "dst", EdgeMemory(), settings)
    simulate_transfer(net, scheduler, duration_s=40.0, step_s=0.25, block_bytes=block)
    return scheduler


def samples(scheduler: Recording, edge: tuple[str, str]) -> list[Measurement]:
    return [e for e in scheduler.events if isinstance(e, Measurement) and e.edge == edge]


def test_a_slow_hop_reports_when_its_copies_end_not_every_step() -> None:
    # two streams of 2 Mbit/s: the first two 1 MiB copies take 4.2 s together, then one ends every 2.1 s
    slow = network(direct_mbit=2.0, other_mbit=0.1, depot=False)
    fluid, blocks = samples(run(slow, None), DIRECT), samples(run(slow, MiB), DIRECT)
    assert fluid[0].at == 0.25  # the fluid model: a sample every step
    first, second = blocks[0], blocks[1]
    assert 4.0 <= first.at <= 4.5
    assert first.bytes >= 2 * MiB
    assert first.began is not None
    assert first.began <= 0.25
    assert 6.0 <= second.at <= 6.75
    assert MiB <= second.bytes < 2 * MiB
    assert second.began is not None
    assert 2.0 <= second.began <= 2.5
    assert abs(sum(b.bytes for b in blocks) - sum(f.bytes for f in fluid)) <= 2 * MiB


def test_a_probe_reports_once_when_it_ends_and_never_later_than_twice_its_time() -> None:
    # a probe on d1's edges at 0.1 Mbit/s a stream cannot end a 1 MiB copy in 8 s: it reports a bound at 2 x probe_s
    scheduler = run(network(direct_mbit=2.0, other_mbit=0.1), MiB, probe_s=4.0)
    probed = [e for e in scheduler.events if isinstance(e, Measurement) and e.edge != DIRECT]
    done = [e for e in scheduler.events if isinstance(e, ProbeDone)]
    assert probed
    assert done
    first = probed[0]
    assert first.at <= 8.0 + 0.25
    assert first.bytes == MiB
    assert first.bytes / first.seconds > mbit(0.1)
    assert scheduler.probing  # the loop heard its probes: it did not fall back to exploring by moving


def test_a_fast_probe_reports_its_copies_after_the_first() -> None:
    # 40 Mbit/s a stream: a copy takes 0.2 s, so the probe runs its 4 s and reports what followed its first copy
    scheduler = run(network(direct_mbit=2.0, other_mbit=40.0), MiB, probe_s=4.0)
    probed = [e for e in scheduler.events if isinstance(e, Measurement) and e.edge != DIRECT]
    assert probed
    first = probed[0]
    assert 4.0 <= first.at <= 4.5
    assert abs(first.bytes / first.seconds - mbit(40.0)) / mbit(40.0) < 0.05
