"""Seeded random scenarios on the testbed, for bench/pathchoice.py and bench/multipath.py (``--random N --seed S``):
which scenarios go (the <=8-depot class only), each scaled to fit the machine and written as a topology, and the
simulator's run of the benchmark's own plan on the same scaled network, so that every figure is reported twice
and the two can be compared (where they disagree, the simulator's model is what gets fixed).

The scenarios are ``lnet.scheduler.scenarios.scenario(seed, index)``, as bench/scheduler.py runs them, at the
indices of the <=8-depot class (``index // 6 % 3 == 0``: 0-5, 18-23, 36-41, ...). Each is scaled by
``emulation_scale`` (its fastest link to 60 Mbit/s; rates and windows x f, loss / f^2, delays kept, see
``Physical.scaled``) and run as it starts: a ``change`` scenario's change of rates is left out, on the testbed
and in the simulator alike. The simulator runs what the testbed runs, the same transfer size and the same
lnet-send settings: each pinned path (``simulate_pinned``), the cold transfer from an empty memory and the warm
ones from the memory it left (``simulate_transfer`` with ``PathScheduler``, as bench/scheduler.py's
``run_random``); a run's Mbit/s is the size over the simulated seconds it took, as lnet-send's is over its own.

Nothing here touches the testbed; the benchmarks do.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import secrets
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.scheduler.scenarios import (
    KINDS,
    SIZES,
    Physical,
    Scenario,
    emulation_scale,
    overlay,
    scenario,
    topology_file,
)
from lnet.scheduler.simulator import RTT_HOST_S, SimNetwork, SimResult, simulate_pinned, simulate_transfer

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
SIM_STEP_S = 0.25
"""The simulator's step for these short transfers: a run's seconds are known to a step."""
SIM_LIMIT_S = 3600.0
"""A simulated transfer that has not finished by then counts as failed."""
RANDOM_SECONDS = 40.0
"""The default size lasts about this long at the oracle's rate in the simulator (as the named cases' runs)."""
RANDOM_QUICK_SECONDS = 10.0
RANDOM_BLOCKS = (16, 512)
RANDOM_QUICK_BLOCKS = (16, 96)
STARTUP_S = 5.0
"""Seconds of an lnet-send run that are not the transfer (start-up, the manifest), for the estimates."""


def fresh_seed() -> int:
    return secrets.randbits(32)


def small_indices(count: int) -> list[int]:
    """The first ``count`` scenario indices of the <=8-depot size class: every kind in turn."""
    per_round = len(KINDS) * len(SIZES)
    return [per_round * (k // len(KINDS)) + k % len(KINDS) for k in range(count)]


@dataclass(frozen=True)
class RandomCase:
    """One scenario, scaled for the testbed: its topology's text, and the simulator's network of the same."""

    scenario: Scenario
    physical: Physical
    """The scenario's network as it starts, scaled (``emulation_scale``)."""
    rtt_bias: float | None = None
    """The simulator's sharing of full links (``SimNetwork.rtt_bias``); None: the model's (``RTT_BIAS``)."""

    @property
    def name(self) -> str:
        return f"r{self.scenario.index:03d}"

    @property
    def network(self) -> SimNetwork:
        network = overlay(self.physical)
        return network if self.rtt_bias is None else replace(network, rtt_bias=self.rtt_bias)

    @property
    def toml(self) -> str:
        case = self.scenario
        clamps = []
        if self.physical.raised_windows:
            clamps.append("windows raised to 14 segments: " + ", ".join(self.physical.raised_windows))
        if self.physical.capped_losses:
            clamps.append("loss capped at 1%: " + ", ".join(f"{a}-{b}" for a, b in self.physical.capped_losses))
        comment = "\n".join([
            f"lnet.scheduler.scenarios.scenario({case.seed}, {case.index}): a {case.kind} scenario, {case.depots} "
            "depots,",
            f"scaled by {self.physical.factor:.4f} (rates and windows x f, loss / f^2, delays kept) by bench/"
            "testbed_scenarios.py.",
            *(clamps or ["No window or loss was clamped."]),
            *(["Its change of link rates is left out: the network as it starts."] if case.change_at_s else []),
        ])
        return topology_file(self.physical, self.name, comment)

    def describe(self) -> str:
        case = self.scenario
        return (f"{case.kind} scenario {case.seed}/{case.index}, {case.depots} depots, scaled x"
                f"{self.physical.factor:.3f}" + (" (its change of rates left out)" if case.change_at_s else ""))


def random_case(seed: int, index: int, rtt_bias: float | None = None) -> RandomCase:
    case = scenario(seed, index)
    physical = case.physical.static()
    return RandomCase(case, physical.scaled(emulation_scale(physical)), rtt_bias)


# -- the simulator's run of a plan ---------------------------------------------------------------------------


def send_config() -> SchedulerConfig:
    """lnet-send's scheduler settings when nothing is given, as bench/scheduler.py defines them (loaded from its
    file: that benchmark is named like the ``scheduler`` package this directory's parent holds)."""
    spec = importlib.util.spec_from_file_location("bench_scheduler", BENCH / "scheduler.py")
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules.get("bench_scheduler") or importlib.util.module_from_spec(spec)
    if "bench_scheduler" not in sys.modules:
        sys.modules["bench_scheduler"] = module
        spec.loader.exec_module(module)
    config = module.send_config()
    assert isinstance(config, SchedulerConfig)
    return config


@dataclass(frozen=True)
class SimSettings:
    """What lnet-send is run with, in the simulator's terms: blocks in flight a hop (``--max-inflight``; lnet-send
    keeps at least min(2, N), and chooses each hop's depth in between when that leaves room) and paths."""

    inflight: int
    max_paths: int
    block_bytes: int | None = None
    """With the transfer's block size the simulator models its end (each path drains the blocks it holds,
    ``simulator._Tail``); None: the fluid model."""
    end_game: bool = True
    peer_rtts: bool = True
    """The scheduler knows the round trips between depots (they time them to their peers, as the testbed's depots
    do), not only the client's own."""
    fill_rule: bool = True
    """The scheduler knows the block size and is told the bytes left (``SchedulerConfig.block_bytes``), as in
    lnet-send: a path whose fill would end after the transfer is not taken. False: the rule before 2026-12-07."""
    route_blame: bool = True
    """A trial's loss is blamed on the newcomers the round trips place on the set's links
    (``SchedulerConfig.route_blame``), as lnet-send does. False: the rule before 2026-12-07."""
    rtt_host_s: tuple[float, float] = RTT_HOST_S
    """Each round trip the scheduler is given carries the hosts' own time, drawn uniformly from this range
    (seconds), as the testbed's do; (0, 0): the links' delays alone, as before 2026-12-07."""

    @property
    def min_streams(self) -> int:
        return min(2, self.inflight)

    def config(self) -> SchedulerConfig:
        return replace(send_config(), streams=self.inflight, min_streams=self.min_streams, max_paths=self.max_paths,
                       block_bytes=self.block_bytes if self.fill_rule else None, route_blame=self.route_blame)

    def options(self) -> dict[str, Any]:
        depth = "adaptive" if self.min_streams < self.inflight else "fixed"
        return {"step_s": SIM_STEP_S, "depth": depth, "min_depth": self.min_streams, "block_bytes": self.block_bytes,
                "end_game": self.end_game}


def mbps_of(result: SimResult, size: int, start_s: float) -> float | None:
    if result.finished_at is None:
        return None
    return size * 8 / 1e6 / (result.finished_at - start_s)


def sim_pinned(network: SimNetwork, path: Sequence[str], size: int, settings: SimSettings) -> float | None:
    """Mbit/s of ``path`` pinned (lnet-send --path), ``size`` bytes."""
    result = simulate_pinned(network, [tuple(path)], streams=settings.inflight, size_bytes=size,
                             duration_s=SIM_LIMIT_S, **settings.options())
    return mbps_of(result, size, 0.0)


@dataclass
class SimTransfers:
    """Scheduled transfers on one network, one after another in simulated time, as a benchmark runs them."""

    network: SimNetwork
    src: str
    dst: str
    size: int
    noise_seed: int
    now: float = 0.0
    runs: int = 0

    def send(self, settings: SimSettings, memory: EdgeMemory) -> float | None:
        """One transfer from ``now`` with ``memory`` (which it updates), its Mbit/s; ``now`` moves to its end."""
        network = self.network
        own, pairs = network.measured_rtts(self.src, seed=self.noise_seed + self.runs, peers=settings.peer_rtts,
                                           host_s=settings.rtt_host_s)
        scheduler = PathScheduler(network.vertices, self.src, self.dst, memory, settings.config(),
                                  rtt_s=own, peer_rtt_s=pairs or None)
        result = simulate_transfer(network, scheduler, start_s=self.now, duration_s=SIM_LIMIT_S, size_bytes=self.size,
                                   seed=self.noise_seed + self.runs, **settings.options())
        self.runs += 1
        mbps = mbps_of(result, self.size, self.now)
        self.now = result.finished_at if result.finished_at is not None else self.now + SIM_LIMIT_S
        return mbps


def noise_seed(case: Scenario) -> int:
    """bench/scheduler.py's seed of the simulator's measurement noise for a scenario."""
    return case.seed * 1_000_003 + 2 * case.index


def copied(memory: EdgeMemory) -> EdgeMemory:
    """A copy of what a cold run left, for one warm run (as the testbed benchmarks copy the memory file)."""
    return copy.deepcopy(memory)


def transfer_size(mbps: float, seconds: float, bounds: tuple[int, int], block_bytes: int) -> int:
    """Whole blocks lasting about ``seconds`` at ``mbps``, within ``bounds``."""
    wanted = math.ceil(mbps * 1e6 / 8 * seconds / block_bytes) if mbps > 0 else bounds[1]
    return max(bounds[0], min(bounds[1], wanted)) * block_bytes


# -- the distribution -----------------------------------------------------------------------------------------


def p10(values: Sequence[float]) -> float:
    """The 10th percentile, nearest rank (as bench/scheduler.py's)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def distribution(rows: Sequence[dict[str, Any]], ratios: Sequence[str]) -> dict[str, Any]:
    """For each ratio: over the scenarios that have it, the median and 10th percentile on the testbed and in the
    simulator, and of their difference (testbed minus simulator) the median and the largest in size."""
    summary: dict[str, Any] = {}
    for key in ratios:
        entry: dict[str, Any] = {}
        for side in ("testbed", "sim"):
            values = [r[side][key] for r in rows if r[side].get(key) is not None]
            entry[side] = {"n": len(values), "median": statistics.median(values) if values else None,
                           "p10": p10(values) if values else None}
        gaps = [r["testbed"][key] - r["sim"][key] for r in rows
                if r["testbed"].get(key) is not None and r["sim"].get(key) is not None]
        entry["difference"] = {"n": len(gaps), "median": statistics.median(gaps) if gaps else None,
                               "largest": max(gaps, key=abs) if gaps else None}
        summary[key] = entry
    return summary


def print_distribution(summary: dict[str, Any], labels: dict[str, str], say: Callable[[str], None]) -> None:
    def f(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    say(f"{'ratio':<28} {'n':>3} {'testbed median / p10':>21} {'simulator median / p10':>23} "
        f"{'testbed - sim: median, largest':>31}")
    for key, entry in summary.items():
        tb, sim, gap = entry["testbed"], entry["sim"], entry["difference"]
        say(f"{labels.get(key, key):<28} {tb['n']:>3} {f(tb['median']):>10} / {f(tb['p10']):<8} "
            f"{f(sim['median']):>11} / {f(sim['p10']):<9} {f(gap['median']):>19}, {f(gap['largest'])}")


def plot_distribution(rows: Sequence[dict[str, Any]], labels: dict[str, str], title: str, path: Path) -> None:
    """One panel per ratio: its CDF over the scenarios on the testbed (solid) and in the simulator (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(labels)
    columns = 2
    figure, axes = plt.subplots(math.ceil(len(keys) / columns), columns, figsize=(11, 4 * math.ceil(len(keys) / 2)),
                                squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        for side, style in (("testbed", "-"), ("sim", "--")):
            values = sorted(r[side][key] for r in rows if r[side].get(key) is not None)
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", linestyle=style, linewidth=2,
                        label=f"{'testbed' if side == 'testbed' else 'simulator'} ({len(values)})")
        ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(labels[key])
        ax.set_xlabel("ratio")
        ax.set_ylabel("fraction of scenarios")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no scenario has this ratio", ha="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
