"""Path choice on the testbed: does lnet find the fastest chain of depots, cold and warm, on emulated
networks whose best chain is known?

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/pathchoice.py [--topologies abilene,detour,...]
        [--size SIZE] [--runs 3] [--max-inflight 2|default] [--max-paths 1] [--block-size 1MiB] [--seed 11]
        [--out DIR] [--quick]
    flock /tmp/lnet-testbed.lock .venv/bin/python bench/pathchoice.py --random N [--seed S] [--only I,J] [--quick] [...]

--random N runs N seeded random scenarios of <=8 depots (lnet.scheduler.scenarios, as bench/scheduler.py --random
runs them; a fresh seed unless --seed, always printed), each scaled to fit the machine (bench/testbed_scenarios.py),
with lnet-send's defaults unless --max-inflight / --max-paths say otherwise, after the named topologies if
--topologies names any. Per scenario: each of its candidate paths pinned once (the best is the oracle; one 3x
slower than the fastest so far is stopped), then --runs repetitions of cold and warm; the simulator runs the same
on the same scaled network at the same size. Printed: each scenario's warm/oracle, cold/oracle, warm/direct (where
direct is the oracle) and warm/sum of its disjoint routes (where it has them), on the testbed and in the
simulator, and their distribution (median, 10th percentile, testbed minus simulator); saved with the CDFs in
bench/results/pathchoice-random-<seed>-<time>.json and pathchoice-random-<seed>.png. --quick: about 10 s a
transfer, 12 scenarios in about 35 minutes (the estimate, from the simulator's rates, is printed first). --only I,J
runs only those of the N (their r-numbers), e.g. to run again, before and after a change, the scenarios that missed.

Needs root (the testbed). Seven topologies (docs/scheduler.md, "Path choice on the testbed", describes each):
  abilene  deploy/topologies/abilene.toml, the logistics paper's experiment (window-limited hosts, a four-depot chain)
  detour   (a) a narrow direct link and a wide three-hop detour through two depots
  lossy    (b) loss-limited: a long lossy direct link and a chain of short links with the same loss
  window   (c) window-limited hosts on a line, the direct route through them, a side depot
  decoy    (d) decoy depots with one fast and one slow edge, and one good depot
  shared   (e) every overlay edge between the two sides crosses one physical bottleneck
  direct   (f) direct is best: a wide direct link, depots that can only tie it or do worse
All but abilene are generated from --seed (default 11); each topology's TOML and seed are saved in --out.

For each topology, depots on every host but the source (and the routers of `shared`), then:
  1. the oracle's edges: every overlay edge (u, v) measured alone, nothing else running, with lnet-send pinned to
     the one hop, run in u's namespace with a depots file whose `here` is u, at the benchmark's block size and
     blocks in flight. The figure is the rate from the first block's arrival to the last's (so start-up is left
     out), about EDGE_SECONDS long.
  2. the three widest paths over those figures (every simple path; ties go to fewer hops), and the direct path
     if it is within 15% of the widest and not among them, each pinned and run once at the topology's size; the
     best run's Mbit/s (size over lnet-send's own seconds) is the oracle.
  3. --runs repetitions of: fresh depots (nothing in their links logs), lnet pinned direct, lnet cold (--cold, a
     fresh memory file), lnet warm (the memory the cold run left). Medians of lnet-send's --json Mbit/s.
Figures per topology, with the targets printed beside them (met / MISSED):
  warm/oracle >= 0.9 and cold/oracle >= 0.75;
  chain/hop: the oracle chain's rate once going (first to last arrival) over its weakest hop alone >= 0.85;
  warm/direct >= 0.95 where direct is best (the `direct` topology, or wherever the oracle's chain is direct);
  cold to 90%: when the cold run's rate over a trailing COLD_WINDOW_S window first reaches 90% of the oracle
  chain's rate once going, and holds it (the run averages that much from the window's start to its last
  arrival: a first burst on a lossy link does not count), median over the cold runs, <= 30 s.
The default size makes a run last about RUN_SECONDS at the rate the oracle's edges predict. A full default run
takes about two hours (the estimate is printed first); --quick (tiny sizes, one run) is a smoke test of a few
minutes per topology. Progress one line per transfer; at the end a table and one JSON line; every report,
trace (lnet-send --trace), summary, topology and the whole result (pathchoice.json) are written into --out.
Every testbed is brought down however the benchmark ends (an error, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # its sibling modules, however it is loaded (a test loads it by path)

import testbed_scenarios as ts  # noqa: E402  (bench/testbed_scenarios.py: the random scenarios, scaled)
from reruns import rerun_command  # noqa: E402  (bench/reruns.py)

from lnet.client.commands.send_args import DEFAULT_MAX_PATHS  # noqa: E402
from lnet.client.formats.report import TimelinePoint, first_reaching, short_path  # noqa: E402
from lnet.scheduler import EdgeMemory  # noqa: E402
from lnet.scheduler.scenarios import steady_rate  # noqa: E402
from lnet.scheduler.simulator import SimNetwork  # noqa: E402
from lnet.testbed import Testbed  # noqa: E402
from lnet.testbed.topology import Topology  # noqa: E402
from lnet.units import format_size, parse_size  # noqa: E402

PY = sys.executable
PORT = 6714  # generation g of the depots listens on PORT + g: no waiting for the last one's sockets
STARTUP_TIMEOUT_S = 30.0
DEFAULT_SEED = 11
T = TypeVar("T")

EDGE_SECONDS = 10.0  # how long one edge of the oracle is measured for, at the rate its design predicts
EDGE_BLOCKS = (16, 64)  # at least and at most this many blocks per edge measurement
RUN_SECONDS = 40.0  # the default size lasts about this long at the rate the oracle's edges predict
RUN_BLOCKS = (16, 512)
QUICK_EDGE_SECONDS, QUICK_EDGE_BLOCKS, QUICK_RUN_BLOCKS = 2.0, (6, 6), 8
COLD_WINDOW_S = 4.0
TARGETS = {"warm_over_oracle": 0.9, "cold_over_oracle": 0.75, "chain_over_hop": 0.85, "warm_over_direct": 0.95,
           "cold_seconds_to_90pct": 30.0}
WIDEST = 3
DIRECT_NEAR = 0.85


# -- the topologies ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One topology of the benchmark: its TOML, the transfer's ends, and what it tests."""

    name: str
    family: str
    tests: str
    toml: str
    source: str
    dest: str
    routers: tuple[str, ...] = ()  # hosts without a depot
    seed: int | None = None  # None: a fixed file
    direct_best: bool = False

    @property
    def topology(self) -> Topology:
        return Topology.parse(self.toml, default_name=self.name)

    @property
    def depots(self) -> list[str]:
        return [h for h in self.topology.host_names if h != self.source and h not in self.routers]

    @property
    def vertices(self) -> list[str]:
        return [self.source, *self.depots]

    def edges(self) -> list[tuple[str, str]]:
        """Every overlay edge a path from source to dest can use: none out of dest, none into the source."""
        return [(u, v) for u in self.vertices if u != self.dest for v in self.depots if v != u]


def design_mbps(topology: Topology, u: str, v: str, inflight: int) -> float:
    """What the topology's numbers predict for ``inflight`` TCP streams from u to v: the narrowest link on the
    route (TCP payload of each packet), the receiver's window over the route's round trip per stream, and for
    loss the Mathis et al. bound per stream. A guide for generating topologies and sizing runs; the benchmark
    measures the truth."""
    route = topology.route(u, v)
    links = [topology.link(a, b) for a, b in itertools.pairwise(route)]
    rtt_s = 2 * sum(link.delay_ms for link in links) / 1000
    mss = topology.mtu - 52  # IPv4 and TCP headers with timestamps
    rate = min((link.rate_mbit for link in links if link.rate_mbit is not None), default=math.inf) * mss / topology.mtu
    window = inflight * topology.host(v).window_bytes * 8 / rtt_s / 1e6
    loss = 1 - math.prod(1 - link.loss for link in links)
    mathis = inflight * 1.22 * mss * 8 / (rtt_s * math.sqrt(loss)) / 1e6 if loss > 0 else math.inf
    return min(rate, window, mathis)


def widest_paths(vertices: Sequence[str], source: str, dest: str, figures: dict[tuple[str, str], float],
                 k: int = WIDEST) -> list[tuple[list[str], float]]:
    """The ``k`` simple paths from source to dest with the largest smallest edge (missing edges are 0), ties to
    fewer hops, then to the order of ``vertices``. Brute force: fine up to about nine vertices."""
    middle = [v for v in vertices if v not in (source, dest)]
    found: list[tuple[float, int, int, list[str]]] = []
    order = 0
    for hops in range(len(middle) + 1):
        for inner in itertools.permutations(middle, hops):
            path = [source, *inner, dest]
            width = min(figures.get(edge, 0.0) for edge in itertools.pairwise(path))
            found.append((-width, len(path), order, path))
            order += 1
    found.sort()
    return [(path, -negative) for negative, _, _, path in found[:k]]


def oracle_candidates(case: Case, figures: dict[tuple[str, str], float]) -> list[tuple[list[str], float]]:
    """The WIDEST widest paths over the edges' figures, and the direct path too when it is not among them but
    within DIRECT_NEAR of the widest: where paths nearly tie (the `direct` topology), which one a short
    measurement ranks first is noise, and the oracle should not miss the direct path that lnet runs anyway."""
    ranked = widest_paths(case.vertices, case.source, case.dest, figures)
    direct = [case.source, case.dest]
    width = figures.get((case.source, case.dest), 0.0)
    if all(path != direct for path, _ in ranked) and width >= DIRECT_NEAR * ranked[0][1]:
        ranked.append((direct, width))
    return ranked


def _toml(name: str, comment: str, windows: dict[str, str | None], links: list[dict[str, Any]],
          default_window: str = "4MiB") -> str:
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [f'name = "{name}"', "mtu = 1500", "", "[defaults]", f'window = "{default_window}"',
              'congestion = "cubic"', ""]
    for host, window in windows.items():
        lines.append(f"[hosts.{host}]")
        if window is not None:
            lines.append(f'window = "{window}"')
    for link in links:
        lines += ["", "[[links]]"]
        for key, value in link.items():
            lines.append(f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value:g}")
    return "\n".join(lines) + "\n"


def _design(case: Case, inflight: int) -> tuple[list[tuple[list[str], float]], dict[tuple[str, str], float]]:
    topology = case.topology
    figures = {(u, v): design_mbps(topology, u, v, inflight) for u, v in case.edges()}
    return widest_paths(case.vertices, case.source, case.dest, figures, k=len(case.vertices) ** 3), figures


def _draw(name: str, seed: int, make: Callable[[random.Random], Case], holds: Callable[[Case], bool]) -> Case:
    """The first topology ``make`` draws from the seeded generator for which ``holds`` (the family's property
    under the design figures at DESIGN_INFLIGHT) is true."""
    rng = random.Random(f"{seed}:{name}")
    for _ in range(500):
        case = make(rng)
        if holds(case):
            return case
    raise RuntimeError(f"no {name} topology with its property in 500 draws from seed {seed}")


DESIGN_INFLIGHT = 2  # the generated properties are designed for the seed's setting: 2 blocks in flight per hop


def _r(value: float) -> float:
    return round(value, 1)


def abilene(seed: int) -> Case:
    path = REPO / "deploy" / "topologies" / "abilene.toml"
    return Case("abilene", "the logistics paper",
                "the logistics paper's experiment: window-limited hosts, a four-depot chain (fixed file)",
                path.read_text(), "ornl", "svl")


def detour(seed: int) -> Case:
    tests = "(a) a narrow direct link and a wide three-hop detour through two depots"

    def make(rng: random.Random) -> Case:
        direct_ms, narrow = _r(rng.uniform(15, 25)), _r(rng.uniform(5, 8))
        hops = [_r(rng.uniform(direct_ms / 3 + 1, direct_ms / 3 + 5)) for _ in range(3)]
        window = f"{rng.randrange(48, 84, 4)}KiB"
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   f"src -> dst directly: {direct_ms:g} ms, {narrow:g} Mbit/s (the shortest delay, so the route of\n"
                   "src -> dst); the detour src - d1 - d2 - dst: three links of about 40 Mbit/s whose delays add up\n"
                   f"to more. Receivers' windows ({window}) let one link run at its rate but not two: the whole\n"
                   "detour, one depot per link, is the one best path.")
        links = [{"a": "src", "b": "dst", "delay_ms": direct_ms, "rate_mbit": narrow}]
        for (a, b), ms in zip([("src", "d1"), ("d1", "d2"), ("d2", "dst")], hops, strict=True):
            links.append({"a": a, "b": b, "delay_ms": ms, "rate_mbit": _r(rng.uniform(35, 45))})
        return Case("detour", "a", tests, _toml("detour", comment, {"src": None, "d1": window, "d2": window,
                                                                    "dst": window}, links), "src", "dst", seed=seed)

    def holds(case: Case) -> bool:
        ranked, figures = _design(case, DESIGN_INFLIGHT)
        (best, width), (_, second) = ranked[0], ranked[1]
        return (case.topology.route("src", "dst") == ["src", "dst"] and best == ["src", "d1", "d2", "dst"]
                and width >= 1.3 * second and figures[("src", "dst")] <= 0.4 * width)

    return _draw("detour", seed, make, holds)


def lossy(seed: int) -> Case:
    tests = "(b) loss-limited: a long lossy direct link, and a chain of short links with the same loss"

    def make(rng: random.Random) -> Case:
        direct_ms, loss = _r(rng.uniform(35, 45)), round(rng.uniform(0.003, 0.006), 4)
        hops = [_r(rng.uniform(direct_ms / 3 + 1, direct_ms / 3 + 4)) for _ in range(3)]
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   f"Every link drops {loss:g} of its packets each way and carries 50 Mbit/s; windows (4 MiB) do not\n"
                   f"bind. src -> dst directly: {direct_ms:g} ms one way; the chain src - m1 - m2 - dst: three links\n"
                   "whose delays add up to more. Loss-based TCP runs at about MSS / (RTT sqrt(loss)), so each short\n"
                   "hop runs about three times as fast as the direct link, and skipping a depot costs twice the\n"
                   "round trip and twice the loss.")
        links = [{"a": "src", "b": "dst", "delay_ms": direct_ms, "rate_mbit": 50, "loss": loss}]
        for (a, b), ms in zip([("src", "m1"), ("m1", "m2"), ("m2", "dst")], hops, strict=True):
            links.append({"a": a, "b": b, "delay_ms": ms, "rate_mbit": 50, "loss": loss})
        return Case("lossy", "b", tests, _toml("lossy", comment, {h: None for h in ("src", "m1", "m2", "dst")},
                                               links), "src", "dst", seed=seed)

    def holds(case: Case) -> bool:
        ranked, figures = _design(case, DESIGN_INFLIGHT)
        best, width = ranked[0]
        return (case.topology.route("src", "dst") == ["src", "dst"] and best == ["src", "m1", "m2", "dst"]
                and figures[("src", "dst")] <= 0.5 * width)

    return _draw("lossy", seed, make, holds)


def window(seed: int) -> Case:
    tests = "(c) window-limited hosts on a line, the direct route through them, and a side depot"

    def make(rng: random.Random) -> Case:
        line = ["src", "a", "b", "c", "dst"]
        windows = {h: f"{rng.randrange(24, 52, 4)}KiB" for h in [*line, "e"]}
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   "src - a - b - c - dst on a line of 5-12 ms, 40 Mbit/s links; e hangs off b. Every host has a\n"
                   "small window (24-48 KiB, the seed's 'restrictively low maximum TCP window sizes'), so a stream\n"
                   "runs at window / RTT: short hops beat the long direct route, and which depots to use depends\n"
                   "on the windows and delays.")
        links = [{"a": a, "b": b, "delay_ms": _r(rng.uniform(5, 12)), "rate_mbit": 40}
                 for a, b in itertools.pairwise(line)]
        links.append({"a": "b", "b": "e", "delay_ms": _r(rng.uniform(3, 8)), "rate_mbit": 40})
        return Case("window", "c", tests, _toml("window", comment, windows, links), "src", "dst", seed=seed)

    def holds(case: Case) -> bool:
        ranked, figures = _design(case, DESIGN_INFLIGHT)
        (best, width), (_, second) = ranked[0], ranked[1]
        return len(best) >= 4 and width >= 1.15 * second and figures[("src", "dst")] <= 0.5 * width

    return _draw("window", seed, make, holds)


def decoy(seed: int) -> Case:
    tests = "(d) decoy depots with one fast and one slow edge, and one good depot"

    def make(rng: random.Random) -> Case:
        direct_ms = _r(rng.uniform(14, 17))
        good_ms = [_r(rng.uniform(direct_ms / 2 + 1, direct_ms / 2 + 4)) for _ in range(2)]
        near, far = _r(rng.uniform(1.5, 2.5)), _r(direct_ms - rng.uniform(0.5, 1.0))
        slow = [_r(rng.uniform(3, 5)) for _ in range(2)]
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   f"src -> dst directly: {direct_ms:g} ms, about 10 Mbit/s; through `good`: two links of\n"
                   "about 30 Mbit/s, the best path. `fastin` is close to src over a 50 Mbit/s link but reaches dst\n"
                   "only over a slow one; `fastout` is the mirror image (a slow link from src, a fast one to dst).\n"
                   "A scheduler that trusts one measured edge of a decoy, or the unknown other one, is lured away\n"
                   "from `good`. Windows (4 MiB) do not bind. Delays keep every route on its own link.")
        links = [
            {"a": "src", "b": "dst", "delay_ms": direct_ms, "rate_mbit": _r(rng.uniform(8, 12))},
            {"a": "src", "b": "good", "delay_ms": good_ms[0], "rate_mbit": _r(rng.uniform(25, 35))},
            {"a": "good", "b": "dst", "delay_ms": good_ms[1], "rate_mbit": _r(rng.uniform(25, 35))},
            {"a": "src", "b": "fastin", "delay_ms": near, "rate_mbit": 50},
            {"a": "fastin", "b": "dst", "delay_ms": far, "rate_mbit": slow[0]},
            {"a": "src", "b": "fastout", "delay_ms": far, "rate_mbit": slow[1]},
            {"a": "fastout", "b": "dst", "delay_ms": near, "rate_mbit": 50},
        ]
        hosts = {h: None for h in ("src", "good", "fastin", "fastout", "dst")}
        return Case("decoy", "d", tests, _toml("decoy", comment, hosts, links), "src", "dst", seed=seed)

    def holds(case: Case) -> bool:
        topology = case.topology
        ranked, figures = _design(case, DESIGN_INFLIGHT)
        best, width = ranked[0]
        own_links = all(topology.route(a, b) == [a, b] for a, b in
                        [("src", "dst"), ("fastin", "dst"), ("src", "fastout"), ("src", "good"), ("good", "dst")])
        return own_links and best == ["src", "good", "dst"] and figures[("src", "dst")] <= 0.5 * width

    return _draw("decoy", seed, make, holds)


def shared(seed: int) -> Case:
    tests = "(e) overlay edges that share one physical bottleneck"

    def make(rng: random.Random) -> Case:
        access = [_r(rng.uniform(15, 22)) for _ in range(2)]
        bottleneck = _r(rng.uniform(15, 22))
        win = f"{rng.randrange(56, 80, 4)}KiB"
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   "A dumbbell: src and depot a on the router `left`, depot b and dst on the router `right` (the\n"
                   f"routers run no depot). left - right is the one narrow link ({bottleneck:g} Mbit/s), crossed\n"
                   "by every overlay edge from one side to the other: src -> dst, src -> b, a -> b, a -> dst.\n"
                   f"Windows ({win}) make the long direct route window-limited; relaying at a and b shortens the\n"
                   "round trips, so the chains reach the bottleneck and tie there. Probes and exploration across\n"
                   "left - right take from the transfer.")
        links = [
            {"a": "src", "b": "left", "delay_ms": access[0], "rate_mbit": 50},
            {"a": "a", "b": "left", "delay_ms": 1, "rate_mbit": 50},
            {"a": "left", "b": "right", "delay_ms": _r(rng.uniform(3, 6)), "rate_mbit": bottleneck},
            {"a": "right", "b": "b", "delay_ms": 1, "rate_mbit": 50},
            {"a": "right", "b": "dst", "delay_ms": access[1], "rate_mbit": 50},
        ]
        hosts = {h: None for h in ("src", "a", "left", "right", "b", "dst")}
        return Case("shared", "e", tests, _toml("shared", comment, hosts, links, default_window=win), "src", "dst",
                    routers=("left", "right"), seed=seed)

    def holds(case: Case) -> bool:
        ranked, figures = _design(case, DESIGN_INFLIGHT)
        width = ranked[0][1]
        bottleneck = case.topology.link("left", "right").rate_mbit or 0.0
        return figures[("src", "dst")] <= 0.75 * width and width >= 0.9 * bottleneck * 1448 / 1500

    return _draw("shared", seed, make, holds)


def direct(seed: int) -> Case:
    tests = "(f) direct is best: a wide direct link; relaying can at most tie it"

    def make(rng: random.Random) -> Case:
        direct_ms, rate = _r(rng.uniform(20, 30)), _r(rng.uniform(25, 35))
        comment = (f"Generated by bench/pathchoice.py, seed {seed}:\n{tests}.\n"
                   f"src -> dst directly: {direct_ms:g} ms, {rate:g} Mbit/s, windows (4 MiB) not binding. n1 sits\n"
                   "next to src and n2 next to dst (every path through them still crosses the direct link: a tie at\n"
                   "best); n3 is reached over slower links of its own. Fewer hops win ties: direct is the answer.")
        side = [_r(rng.uniform(direct_ms / 2 + 2, direct_ms / 2 + 6)) for _ in range(2)]
        links = [
            {"a": "src", "b": "dst", "delay_ms": direct_ms, "rate_mbit": rate},
            {"a": "src", "b": "n1", "delay_ms": 2, "rate_mbit": 50},
            {"a": "n2", "b": "dst", "delay_ms": 2, "rate_mbit": 50},
            {"a": "src", "b": "n3", "delay_ms": side[0], "rate_mbit": _r(rng.uniform(8, 14))},
            {"a": "n3", "b": "dst", "delay_ms": side[1], "rate_mbit": _r(rng.uniform(8, 14))},
        ]
        hosts = {h: None for h in ("src", "n1", "n2", "n3", "dst")}
        return Case("direct", "f", tests, _toml("direct", comment, hosts, links), "src", "dst", seed=seed,
                    direct_best=True)

    def holds(case: Case) -> bool:
        ranked, _ = _design(case, DESIGN_INFLIGHT)
        return case.topology.route("src", "dst") == ["src", "dst"] and ranked[0][0] == ["src", "dst"]

    return _draw("direct", seed, make, holds)


CASES: dict[str, Callable[[int], Case]] = {
    "abilene": abilene, "detour": detour, "lossy": lossy, "window": window, "decoy": decoy, "shared": shared,
    "direct": direct,
}


# -- figures -------------------------------------------------------------------------------------------------


def timeline_of(summary: dict[str, Any]) -> list[TimelinePoint]:
    return [TimelinePoint(float(p["t"]), int(p["bytes"]), float(p["mbps"]), tuple(p["path"]))
            for p in summary.get("timeline", [])]


def going_mbps(summary: dict[str, Any]) -> float | None:
    """The rate once going: the bytes that arrived after the first arrival over the time from it to the last
    (None with fewer than two arrivals). Leaves out connection set-up and the first blocks' latency. The timeline
    is sampled every tick, so each arrival is placed in the middle of the tick it was seen in."""
    arrivals: list[tuple[float, int]] = []
    before, count = 0.0, 0
    for point in timeline_of(summary):
        if point.nbytes > count:
            arrivals.append(((before + point.t) / 2, point.nbytes))
            count = point.nbytes
        before = point.t
    if len(arrivals) < 2 or arrivals[-1][0] <= arrivals[0][0]:
        return None
    (t0, b0), (t1, b1) = arrivals[0], arrivals[-1]
    return (b1 - b0) * 8 / 1e6 / (t1 - t0)


def median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def figures_of(case: Case, result: dict[str, Any]) -> dict[str, Any]:
    """The per-topology figures and targets from a case's measurements (pure)."""
    runs = result["runs"]
    mbps = {kind: median([r["mbps"] for r in runs if r["kind"] == kind and r["ok"]])
            for kind in ("direct", "cold", "warm")}
    oracle = result.get("oracle") or {}
    oracle_mbps, oracle_going = oracle.get("mbps"), oracle.get("going_mbps")
    reach: list[float | None] = []
    for run in runs:
        if run["kind"] == "cold" and run["ok"] and oracle_going:
            reached = first_reaching(timeline_of(run["summary"]), 0.9 * oracle_going, COLD_WINDOW_S, held=True)
            reach.append(reached if reached is not None else math.inf)
    figures: dict[str, Any] = {
        "oracle_mbps": oracle_mbps, "oracle_path": oracle.get("path"), "direct_mbps": mbps["direct"],
        "cold_mbps": mbps["cold"], "warm_mbps": mbps["warm"],
        "warm_over_oracle": ratio(mbps["warm"], oracle_mbps), "cold_over_oracle": ratio(mbps["cold"], oracle_mbps),
        "warm_over_direct": ratio(mbps["warm"], mbps["direct"]),
        "chain_over_hop": ratio(oracle_going, oracle.get("weakest_hop_mbps")),
        "cold_seconds_to_90pct": median(reach),
    }
    direct_is_best = case.direct_best or oracle.get("path") == [case.source, case.dest]
    checks: dict[str, bool | None] = {}
    for key, target in TARGETS.items():
        value = figures[key]
        if key == "warm_over_direct" and not direct_is_best:
            continue
        if value is None:
            checks[key] = None
        elif key == "cold_seconds_to_90pct":
            checks[key] = value <= target
        else:
            checks[key] = value >= target
    figures["targets"] = checks
    return figures


# -- running lnet-send on the testbed ------------------------------------------------------------------------


RTT_INTERVAL, RTT_SETTLE_S = "2s", 3.0


@dataclass
class Fleet:
    """The depots of one topology: one generation at a time, each on its own port and data directories."""

    tb: Testbed
    hosts: list[str]
    root: Path
    nursery: trio.Nursery
    generation: int = -1
    processes: list[trio.Process] = field(default_factory=list)

    @property
    def port(self) -> int:
        return PORT + self.generation

    def url(self, host: str) -> str:
        return f"http://{self.tb.address(host)}:{self.port}"

    async def start(self) -> None:
        """Fresh depots on every host, each timing the round trip to every other (``--weather-peer``, no weather
        budget: round trips only, lnet.depot.round_trips) every ``RTT_INTERVAL``, and ``RTT_SETTLE_S`` for
        the last one started to be timed by all: what long-running depots would have in their status."""
        await self.stop()
        self.generation += 1
        for host in self.hosts:
            await self._start_one(host)
        await trio.sleep(RTT_SETTLE_S)

    async def _start_one(self, host: str) -> None:
        data = self.root / f"depots-{self.generation}" / host
        argv = [PY, "-m", "lnet.depot.cli", "--listen", f"{self.tb.address(host)}:{self.port}", "--name", host,
                "--data-dir", str(data), "--capacity", "3GiB", "--max-allocation", "64MiB", "--log-level", "warning",
                "--rtt-interval", RTT_INTERVAL]
        for peer in self.hosts:
            if peer != host:
                argv += ["--weather-peer", self.url(peer)]
        process = await self.tb.spawn(host, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        self.processes.append(process)
        assert process.stderr is not None
        stream = process.stderr
        seen = b""
        with trio.fail_after(STARTUP_TIMEOUT_S):
            while b"serving on" not in seen:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    raise RuntimeError(f"the depot on {host} exited: {seen.decode(errors='replace')}")
                seen += chunk
        log = self.root / f"depot-{host}.log"
        self.nursery.start_soon(self._drain, stream, log, seen)  # a full pipe would stall the depot

    @staticmethod
    async def _drain(stream: trio.abc.ReceiveStream, log: Path, seen: bytes) -> None:
        async with await trio.open_file(log, "ab") as out:
            await out.write(seen)
            while chunk := await stream.receive_some(65536):
                await out.write(chunk)

    async def stop(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
        for process in self.processes:
            with trio.move_on_after(5.0):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        self.processes.clear()
        if self.generation >= 0:
            shutil.rmtree(self.root / f"depots-{self.generation}", ignore_errors=True)

    def depots_file(self, path: Path, here: str, depots: Sequence[str]) -> Path:
        lines = [f'here = "{here}"']
        for host in depots:
            lines += [f"[depots.{host}]", f'url = "{self.url(host)}"']
        path.write_text("\n".join(lines) + "\n")
        return path


class Payloads:
    """Random files of the sizes asked for, each written once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    async def get(self, size: int) -> Path:
        path = self.root / f"{size}.bin"
        if not path.exists():
            def write() -> None:
                with open(path.with_suffix(".tmp"), "wb") as out:
                    left = size
                    while left:
                        chunk = os.urandom(min(left, 16 << 20))
                        out.write(chunk)
                        left -= len(chunk)
                path.with_suffix(".tmp").rename(path)
            await trio.to_thread.run_sync(write)
        return path


@dataclass(frozen=True)
class Settings:
    block: str
    block_bytes: int
    inflight: int | None  # None: lnet-send's own rule
    runs: int
    quick: bool
    size: int | None
    max_paths: int = 1  # of the cold and warm runs (this benchmark's --max-paths; bench/multipath.py sets its own)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        """From the options this benchmark and bench/multipath.py share."""
        return cls(args.block_size, parse_size(args.block_size), args.max_inflight, 1 if args.quick else args.runs,
                   args.quick, parse_size(args.size) if args.size is not None else None,
                   getattr(args, "lnet_max_paths", 1))

    @property
    def design_inflight(self) -> int:
        return self.inflight if self.inflight is not None else 4  # lnet-send's initial window

    def blocks(self, mbps: float, seconds: float, bounds: tuple[int, int]) -> int:
        wanted = math.ceil(mbps * 1e6 / 8 * seconds / self.block_bytes) if math.isfinite(mbps) else bounds[1]
        return max(bounds[0], min(bounds[1], wanted))


async def lnet_send(tb: Testbed, host: str, depots_file: Path, payload: Path, dest: str, extra: list[str],
                    out: Path, memory: Path, settings: Settings, timeout_s: float, *, python: str = PY
                    ) -> dict[str, Any]:
    """One lnet-send on ``host``: its --json summary (with the report saved at ``out``.json), or the failure;
    ``python``: the interpreter whose lnet runs it (bench/pinned_ab.py's other side)."""
    argv = [python, "-m", "lnet.client.send", str(payload), "--to", dest, "--depots", str(depots_file),
            "--memory", str(memory), "--block-size", settings.block, "--duration", "30m", "--json", "--no-progress",
            "--report", str(out.with_suffix(".report.json")), "--manifest", str(out.with_suffix(".manifest.json")),
            "--trace", str(out.with_suffix(".trace.jsonl")),
            *(["--max-inflight", str(settings.inflight)] if settings.inflight is not None else []), *extra]
    started = time.monotonic()
    done: subprocess.CompletedProcess[bytes] | None = None
    with trio.move_on_after(timeout_s):
        done = await tb.run(host, argv, check=False)
    wall = time.monotonic() - started
    record: dict[str, Any] = {"argv": argv[2:], "host": host, "wall_s": wall}
    if done is None:
        record.update(ok=False, error=f"stopped after {timeout_s:.0f} s")
    elif done.returncode != 0:
        record.update(ok=False, error=f"exit {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
    else:
        summary = json.loads(done.stdout)
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        record.update(ok=True, seconds=summary["seconds"], mbps=summary["mbps"], path=summary["path"],
                      going_mbps=going_mbps(summary), summary=summary,
                      paths=[[a["path"], a["end"] - a["start"]] for a in summary.get("path_attempts", [])])
    if done is not None and done.stderr:  # its notes: re-sends, depots left out, what failed
        out.with_suffix(".log").write_bytes(done.stderr)
    return record


def run_timeout(size: int, settings: Settings) -> float:
    return 120.0 + size * 8 / 1e6 / 0.5  # generous: half a Mbit/s would be a failure anyway


async def run_case(case: Case, settings: Settings, out_root: Path, payloads: Payloads,
                   say: Callable[[str], None]) -> dict[str, Any]:
    out = out_root / case.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "topology.toml").write_text(case.toml)
    result: dict[str, Any] = {"topology": case.name, "family": case.family, "tests": case.tests, "seed": case.seed,
                              "source": case.source, "dest": case.dest, "depots": case.depots,
                              "toml": str(out / "topology.toml"), "edges": {}, "widest": [], "runs": []}
    try:
        await measure_case(case, settings, out, payloads, result, say)
    finally:  # the depots' buffers, whatever happened
        for data in out.glob("depots-*"):
            shutil.rmtree(data, ignore_errors=True)
    result["figures"] = figures_of(case, result)
    return result


async def measure_case(case: Case, settings: Settings, out: Path, payloads: Payloads, result: dict[str, Any],
                       say: Callable[[str], None]) -> None:
    topology = case.topology
    scratch = out / "scratch-edges.json"
    async with Testbed(topology, name=f"pc-{case.name}") as tb, trio.open_nursery() as nursery:
        fleet = Fleet(tb, case.depots, out, nursery)
        await fleet.start()
        main_depots = fleet.depots_file(out / "depots.toml", case.source, case.depots)
        # 1. every edge alone
        (out / "edges").mkdir()
        edge_s = QUICK_EDGE_SECONDS if settings.quick else EDGE_SECONDS
        bounds = QUICK_EDGE_BLOCKS if settings.quick else EDGE_BLOCKS
        figures: dict[tuple[str, str], float] = {}
        for u, v in case.edges():
            design = design_mbps(topology, u, v, settings.design_inflight)
            size = settings.blocks(design, edge_s, bounds) * settings.block_bytes
            depots_file = fleet.depots_file(out / "edges" / f"{u}.depots.toml", u, [v])
            record = await lnet_send(tb, u, depots_file, await payloads.get(size), v, ["--path", v, "--cold"],
                                     out / "edges" / f"{u}-{v}", scratch, settings, run_timeout(size, settings))
            figure = record.get("going_mbps") or 0.0
            figures[(u, v)] = figure
            result["edges"][f"{u}->{v}"] = {"going_mbps": figure, "mbps": record.get("mbps"), "design_mbps": design,
                                            "bytes": size, "ok": record["ok"], "error": record.get("error")}
            say(f"  edge {u} -> {v}: {figure:6.2f} Mbit/s once going (design {design:.1f})"
                + ("" if record["ok"] else f" FAILED: {record['error'][:200]}"))
        # 2. the three widest paths, pinned
        widest = oracle_candidates(case, figures)
        predicted = widest[0][1]
        if settings.size is not None:
            size = settings.size
        else:
            blocks = QUICK_RUN_BLOCKS if settings.quick else settings.blocks(predicted, RUN_SECONDS, RUN_BLOCKS)
            size = blocks * settings.block_bytes
        result["size"] = size
        payload = await payloads.get(size)
        timeout = run_timeout(size, settings)
        say(f"  transfers of {format_size(size)}; the widest paths by the edges alone: "
            + "; ".join(f"{' -> '.join(p)} {w:.2f}" for p, w in widest))
        for i, (path, width) in enumerate(widest):
            record = await lnet_send(tb, case.source, main_depots, payload, case.dest,
                                     ["--path", ",".join(path[1:]), "--cold"], out / f"oracle-{i}", scratch,
                                     settings, timeout)
            entry = {"path": path, "predicted_mbps": width, "weakest_hop_mbps": width,
                     **{k: record.get(k) for k in ("ok", "mbps", "going_mbps", "seconds", "error")}}
            result["widest"].append(entry)
            say(f"  oracle candidate {' -> '.join(path)}: "
                + (f"{record['mbps']:.2f} Mbit/s ({record['going_mbps'] or 0:.2f} once going; weakest hop alone "
                   f"{width:.2f})" if record["ok"] else f"FAILED: {record['error'][:200]}"))
        done = [w for w in result["widest"] if w["ok"]]
        result["oracle"] = max(done, key=lambda w: w["mbps"]) if done else None
        # 3. direct, cold, warm, --runs times, each repetition on fresh depots
        await repetitions(tb, fleet, case, payload, out, scratch, settings, timeout, result, say, direct_from=1)
        await fleet.stop()
        result["emulator"] = {k: v for k, v in (await tb.status()).items() if k not in ("hosts", "links")}
        nursery.cancel_scope.cancel()


async def repetitions(tb: Testbed, fleet: Fleet, case: Case, payload: Path, out: Path, scratch: Path,
                      settings: Settings, timeout_s: float, result: dict[str, Any], say: Callable[[str], None], *,
                      direct_from: int) -> None:
    """--runs repetitions of (direct,) cold and warm, each on fresh depots; pinned direct from repetition
    ``direct_from`` on (a random scenario's first comes from its oracle's pinned runs)."""
    for rep in range(1, settings.runs + 1):
        await fleet.start()
        main_depots = fleet.depots_file(out / "depots.toml", case.source, case.depots)
        memory = out / f"rep{rep}-edges.json"
        memory.unlink(missing_ok=True)
        paths = ["--max-paths", str(settings.max_paths)]  # always: lnet-send's own default is 3
        plan = [("cold", ["--cold", *paths], memory), ("warm", paths, memory)]
        if rep >= direct_from:
            plan.insert(0, ("direct", ["--path", case.dest, "--cold"], scratch))
        for kind, extra, memory_file in plan:
            record = await lnet_send(tb, case.source, main_depots, payload, case.dest, extra,
                                     out / f"rep{rep}-{kind}", memory_file, settings, timeout_s)
            record.update(kind=kind, rep=rep)
            result["runs"].append(record)
            if record["ok"]:
                used = ", ".join(f"{short_path(p)} {s:.1f} s" for p, s in record["paths"])
                say(f"  rep {rep} {kind:<6} {record['mbps']:6.2f} Mbit/s in {record['seconds']:6.1f} s: {used}")
            else:
                say(f"  rep {rep} {kind:<6} FAILED: {record['error'][:300]}")


# -- seeded random scenarios (--random) ---------------------------------------------------------------------

PIN_BOUND, PIN_MIN_S = 3.0, 60.0
RANDOM_RATIOS = {"warm_over_oracle": "warm / oracle", "cold_over_oracle": "cold / oracle",
                 "warm_over_direct": "warm / direct (direct best)", "warm_over_routes": "warm / sum of routes"}


def random_plan(rc: ts.RandomCase) -> list[tuple[str, ...]]:
    """The paths pinned for the oracle: the scenario's candidates (direct among them), then any of its disjoint
    routes that is not one (their sum is the multipath figure's denominator)."""
    case = rc.scenario
    return [*case.candidates, *(route for route in case.routes if route not in case.candidates)]


def random_ratios(case: Case, rc: ts.RandomCase, figures: dict[str, Any], pinned: dict[tuple[str, ...], float | None],
                  direct_best: bool) -> dict[str, float | None]:
    """A scenario's ratios on one side (the testbed's figures, or the simulator's in the same shape)."""
    routes = [pinned.get(tuple(route)) for route in rc.scenario.routes]
    total = sum(r for r in routes if r is not None) if routes and None not in routes else None
    return {"warm_over_oracle": figures["warm_over_oracle"], "cold_over_oracle": figures["cold_over_oracle"],
            "warm_over_direct": figures["warm_over_direct"] if direct_best else None,
            "warm_over_routes": ratio(figures["warm_mbps"], total),
            "oracle_mbps": figures["oracle_mbps"], "cold_mbps": figures["cold_mbps"], "warm_mbps": figures["warm_mbps"],
            "direct_mbps": figures["direct_mbps"], "routes_mbps": total}


@dataclass(frozen=True)
class SimVariant:
    """Which rules and which model the simulator's side runs: by default lnet-send's rules and this version's
    model; each switch gives what an earlier version did, to compare."""

    end_game: bool = True
    """The relay's end game (``RelayConfig.end_game``)."""
    fill_rule: bool = True
    """The scheduler is told the bytes left (``SimSettings.fill_rule``)."""
    route_blame: bool = True
    """A trial's loss is blamed on the newcomers the round trips place on the set's links."""
    exact_rtts: bool = False
    """The scheduler's round trips are the links' delays alone, without the hosts' time (``simulator.RTT_HOST_S``)."""
    max_min: bool = False
    """Full links are shared max-min, every stream alike, not favouring short round trips (``simulator.RTT_BIAS``)."""

    @classmethod
    def of(cls, args: argparse.Namespace) -> SimVariant:
        return cls(end_game=not args.no_end_game, fill_rule=not args.no_fill_rule,
                   route_blame=not args.no_route_blame, exact_rtts=args.exact_rtts, max_min=args.max_min)

    def network(self, rc: ts.RandomCase) -> SimNetwork:
        return replace(rc, rtt_bias=0.0).network if self.max_min else rc.network


def simulate_random(rc: ts.RandomCase, settings: Settings, variant: SimVariant = SimVariant()) -> dict[str, Any]:
    """The simulator's run of this benchmark's plan on the scaled scenario: the size it sizes the runs by (about
    RANDOM_SECONDS at the best candidate's rate alone, or --size), each pinned path, cold, then warm; the end of
    each transfer as the relay runs it (its block size and its end game); the rules and model of ``variant``."""
    case, network = rc.scenario, variant.network(rc)
    sim = ts.SimSettings(settings.inflight or ts.send_config().streams, settings.max_paths, settings.block_bytes,
                         variant.end_game, fill_rule=variant.fill_rule, route_blame=variant.route_blame,
                         rtt_host_s=(0.0, 0.0) if variant.exact_rtts else ts.RTT_HOST_S)
    plan = random_plan(rc)
    if settings.size is not None:
        size = settings.size
    else:
        best = max(steady_rate(network, path, streams=sim.inflight) for path in case.candidates) * 8e-6
        seconds = ts.RANDOM_QUICK_SECONDS if settings.quick else ts.RANDOM_SECONDS
        size = ts.transfer_size(best, seconds, ts.RANDOM_QUICK_BLOCKS if settings.quick else ts.RANDOM_BLOCKS,
                                settings.block_bytes)
    pinned = {path: ts.sim_pinned(network, path, size, sim) for path in plan}
    transfers = ts.SimTransfers(network, case.src, case.dst, size, ts.noise_seed(case))
    memory = EdgeMemory()
    cold = transfers.send(sim, memory)
    warm = transfers.send(sim, memory)
    candidates = {path: mbps for path, mbps in pinned.items() if path in case.candidates and mbps is not None}
    oracle = max(candidates, key=candidates.__getitem__) if candidates else None
    direct = pinned.get((case.src, case.dst))
    return {"size": size, "pinned": [{"path": list(path), "mbps": mbps} for path, mbps in pinned.items()],
            "oracle_path": list(oracle) if oracle else None, "oracle_mbps": candidates.get(oracle) if oracle else None,
            "direct_mbps": direct, "cold_mbps": cold, "warm_mbps": warm, "inflight": sim.inflight,
            "min_inflight": sim.min_streams, "max_paths": sim.max_paths, "step_s": ts.SIM_STEP_S}


def case_of(rc: ts.RandomCase) -> Case:
    """A random scenario as this benchmark's ``Case``."""
    scenario_ = rc.scenario
    return Case(rc.name, scenario_.kind, rc.describe(), rc.toml, scenario_.src, scenario_.dst, seed=scenario_.seed,
                direct_best=scenario_.kind == "direct")


def sim_figures(sim: dict[str, Any]) -> dict[str, Any]:
    """The simulator's run of a scenario (``simulate_random``) in the shape of the testbed's figures."""
    return {
        "oracle_mbps": sim["oracle_mbps"], "cold_mbps": sim["cold_mbps"], "warm_mbps": sim["warm_mbps"],
        "direct_mbps": sim["direct_mbps"], "warm_over_oracle": ratio(sim["warm_mbps"], sim["oracle_mbps"]),
        "cold_over_oracle": ratio(sim["cold_mbps"], sim["oracle_mbps"]),
        "warm_over_direct": ratio(sim["warm_mbps"], sim["direct_mbps"]),
    }


def random_figures(case: Case, rc: ts.RandomCase, result: dict[str, Any]) -> dict[str, Any]:
    """The testbed's and the simulator's ratios for one scenario, side by side."""
    sim = result["sim_run"]
    direct = [case.source, case.dest]
    oracle = result.get("oracle") or {}
    direct_best = case.direct_best or oracle.get("path") == direct or sim["oracle_path"] == direct
    tb_pinned = {tuple(w["path"]): w["mbps"] if w["ok"] else None for w in result["widest"]}
    sim_pinned = {tuple(p["path"]): p["mbps"] for p in sim["pinned"]}
    return {"testbed": random_ratios(case, rc, result["figures"], tb_pinned, direct_best),
            "sim": random_ratios(case, rc, sim_figures(sim), sim_pinned, direct_best)}


async def run_random_case(rc: ts.RandomCase, settings: Settings, out_root: Path, payloads: Payloads,
                          say: Callable[[str], None]) -> dict[str, Any]:
    scenario_ = rc.scenario
    case = case_of(rc)
    out = out_root / case.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "topology.toml").write_text(case.toml)
    sim = simulate_random(rc, settings)
    size = sim["size"]
    result: dict[str, Any] = {
        "topology": case.name, "family": case.family, "tests": case.tests, "seed": scenario_.seed,
        "index": scenario_.index, "kind": scenario_.kind, "depots_n": scenario_.depots, "factor": rc.physical.factor,
        "raised_windows": list(rc.physical.raised_windows),
        "capped_losses": [list(link) for link in rc.physical.capped_losses], "source": case.source,
        "dest": case.dest, "depots": case.depots, "toml": str(out / "topology.toml"), "size": size,
        "routes": [list(route) for route in scenario_.routes], "widest": [], "runs": [], "sim_run": sim}
    say(f"   transfers of {format_size(size)}; the simulator: oracle {fmt(sim['oracle_mbps'], '.2f')} Mbit/s "
        f"({short_path(sim['oracle_path']) if sim['oracle_path'] else '-'}), cold {fmt(sim['cold_mbps'], '.2f')}, "
        f"warm {fmt(sim['warm_mbps'], '.2f')}, direct {fmt(sim['direct_mbps'], '.2f')}")
    try:
        await measure_random(case, rc, settings, out, size, payloads, result, say)
    finally:  # the depots' buffers, whatever happened
        for data in out.glob("depots-*"):
            shutil.rmtree(data, ignore_errors=True)
    result["figures"] = figures_of(case, result)
    result.update(random_figures(case, rc, result))
    return result


async def measure_random(case: Case, rc: ts.RandomCase, settings: Settings, out: Path, size: int,
                         payloads: Payloads, result: dict[str, Any], say: Callable[[str], None]) -> None:
    """As ``measure_case`` without its every-edge step: the scenario names its candidate paths, each is pinned once
    (the best is the oracle; the pinned direct run is the first repetition's direct), then --runs repetitions of
    (direct,) cold and warm, each on fresh depots. A pinned run that has taken PIN_BOUND times the fastest one's
    seconds so far is stopped: it runs at under 1 / PIN_BOUND of that one, so it cannot be the oracle."""
    scratch = out / "scratch-edges.json"
    payload = await payloads.get(size)
    timeout = run_timeout(size, settings)
    fastest_s = math.inf
    predicted = {tuple(p["path"]): p["mbps"] for p in result["sim_run"]["pinned"]}
    direct = (case.source, case.dest)
    async with Testbed(case.topology, name=f"pc-{case.name}") as tb, trio.open_nursery() as nursery:
        fleet = Fleet(tb, case.depots, out, nursery)
        await fleet.start()
        main_depots = fleet.depots_file(out / "depots.toml", case.source, case.depots)
        for i, path in enumerate(random_plan(rc)):
            bound = min(timeout, max(PIN_MIN_S, PIN_BOUND * fastest_s))
            record = await lnet_send(tb, case.source, main_depots, payload, case.dest,
                                     ["--path", ",".join(path[1:]), "--cold"], out / f"oracle-{i}", scratch,
                                     settings, bound)
            if record["ok"]:
                fastest_s = min(fastest_s, record["wall_s"])
            entry = {"path": list(path), "predicted_mbps": predicted.get(path), "weakest_hop_mbps": None,
                     "candidate": path in rc.scenario.candidates, "stopped_s": None if record["ok"] else bound,
                     **{k: record.get(k) for k in ("ok", "mbps", "going_mbps", "seconds", "error")}}
            result["widest"].append(entry)
            if path == direct:  # a direct run stopped as too slow to be the oracle is no failure either
                result["runs"].append({**record, "kind": "direct", "rep": 1, "stopped_s": entry["stopped_s"]})
            say(f"  pinned {' -> '.join(path)}: "
                + (f"{record['mbps']:.2f} Mbit/s (simulator {fmt(predicted.get(path), '.2f')})" if record["ok"]
                   else f"FAILED: {record['error'][:200]}"))
        done = [w for w in result["widest"] if w["ok"] and w["candidate"]]
        result["oracle"] = max(done, key=lambda w: w["mbps"]) if done else None
        await repetitions(tb, fleet, case, payload, out, scratch, settings, timeout, result, say, direct_from=2)
        await fleet.stop()
        result["emulator"] = {k: v for k, v in (await tb.status()).items() if k not in ("hosts", "links")}
        nursery.cancel_scope.cancel()


def estimate_random_seconds(rcs: Sequence[ts.RandomCase], sims: Sequence[dict[str, Any]], settings: Settings) -> float:
    """Each transfer at the rate the simulator gave it, plus lnet-send's start-up; each testbed's and depots'."""
    total = 0.0
    for rc, sim in zip(rcs, sims, strict=True):
        bits = sim["size"] * 8 / 1e6

        def seconds(mbps: float | None, bits: float = bits) -> float:
            return (bits / mbps if mbps else 60.0) + ts.STARTUP_S

        total += 15.0 + 2.0 * (1 + settings.runs) * len(rc.physical.hosts)
        fastest = min(seconds(p["mbps"]) for p in sim["pinned"])
        total += sum(min(seconds(p["mbps"]), max(PIN_MIN_S, PIN_BOUND * fastest)) for p in sim["pinned"])
        total += settings.runs * (seconds(sim["cold_mbps"]) + seconds(sim["warm_mbps"]))
        total += (settings.runs - 1) * seconds(sim["direct_mbps"])
    return total


def print_random(rows: Sequence[dict[str, Any]], say: Callable[[str], None]) -> dict[str, Any]:
    """Each scenario's ratios on the testbed and in the simulator, then their distribution; returns it."""
    say("")
    say("random scenarios: each ratio on the testbed / in the simulator (the same scaled network, size and settings)")
    say(f"{'scenario':<9} {'kind':<9} {'depots':>6} {'scale':>6} {'size':>8} {'oracle Mbit/s':>15}  "
        + "  ".join(f"{label:>22}" for label in RANDOM_RATIOS.values()))
    for row in rows:
        tb, sim = row["testbed"], row["sim"]
        cells = [f"{fmt(tb[key], '.2f')} / {fmt(sim[key], '.2f')}" for key in RANDOM_RATIOS]
        say(f"{row['topology']:<9} {row['kind']:<9} {row['depots_n']:>6} {row['factor']:>6.3f} "
            f"{format_size(row['size']):>8} {fmt(tb['oracle_mbps'], '.1f'):>7} / {fmt(sim['oracle_mbps'], '.1f'):<5}  "
            + "  ".join(f"{cell:>22}" for cell in cells))
    summary = ts.distribution(rows, list(RANDOM_RATIOS))
    say("")
    ts.print_distribution(summary, RANDOM_RATIOS, say)
    return summary


async def bench_random(rcs: Sequence[ts.RandomCase], settings: Settings, out: Path, say: Callable[[str], None]
                       ) -> list[dict[str, Any]]:
    payloads = Payloads(out / "payloads")
    rows: list[dict[str, Any]] = []
    try:
        for rc in rcs:
            say(f"== {rc.name}: {rc.describe()}; topology saved in {out / rc.name / 'topology.toml'}")
            row = await run_random_case(rc, settings, out, payloads, say)
            rows.append(row)
            (out / rc.name / "result.json").write_text(json.dumps(row, indent=1, default=str) + "\n")
    finally:
        shutil.rmtree(out / "payloads", ignore_errors=True)
    return rows


def save_random(bench_name: str, seed: int, rows: list[dict[str, Any]], summary: dict[str, Any],
                labels: dict[str, str], document: dict[str, Any]) -> tuple[Path, Path]:
    """The whole run as JSON and the ratios' CDFs as a picture, under bench/results/."""
    ts.RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    data = ts.RESULTS / f"{bench_name}-random-{seed}-{stamp}.json"
    data.write_text(json.dumps({**document, "seed": seed, "summary": summary, "scenarios": rows}, indent=1,
                               default=str) + "\n")
    picture = ts.RESULTS / f"{bench_name}-random-{seed}.png"
    ts.plot_distribution(rows, labels, f"bench/{bench_name}.py --random {len(rows)} --seed {seed}: testbed and "
                         "simulator", picture)
    return data, picture


# -- the plan and the report ---------------------------------------------------------------------------------


def estimate_seconds(cases: Sequence[Case], settings: Settings) -> float:
    """A rough duration: each edge's measurement and process start-up, then the transfers at the rates the
    design predicts (the direct runs at the direct path's)."""
    total = 0.0
    for case in cases:
        topology = case.topology
        edge_s = QUICK_EDGE_SECONDS if settings.quick else EDGE_SECONDS
        total += len(case.edges()) * (edge_s + 4.0) + 20.0
        ranked, _ = _design(case, settings.design_inflight)
        best = ranked[0][1]
        direct_mbps = design_mbps(topology, case.source, case.dest, settings.design_inflight)
        if settings.size is not None:
            size_bits = settings.size * 8
        elif settings.quick:
            size_bits = QUICK_RUN_BLOCKS * settings.block_bytes * 8
        else:
            size_bits = settings.blocks(best, RUN_SECONDS, RUN_BLOCKS) * settings.block_bytes * 8
        per_run = size_bits / 1e6 / best + 5.0
        direct_run = size_bits / 1e6 / direct_mbps + 5.0
        total += (WIDEST + case.direct_best) * per_run * 1.2 + settings.runs * (2 * per_run * 1.2 + direct_run)
    return total


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    return f"{value:{spec}}{suffix}"


def mark(check: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "n/a"}[check]


def print_table(results: Sequence[dict[str, Any]], settings: Settings) -> None:
    inflight = f"{settings.inflight} in flight per hop" if settings.inflight else "lnet-send's own in-flight rule"
    if settings.max_paths != 1:
        inflight += f", cold and warm with --max-paths {settings.max_paths}"
    print()
    print(f"path choice on the testbed: {settings.block} blocks, {inflight}, {settings.runs} run(s) of each "
          f"(medians); Mbit/s is size over lnet-send's seconds")
    head = (f"{'topology':<9} {'size':>8} {'oracle':>7}  {'oracle path':<24} {'direct':>7} {'cold':>7} {'warm':>7}  "
            f"{'warm/oracle':<13} {'cold/oracle':<13} {'warm/direct':<13} {'chain/hop':<13} {'cold to 90%':<14}")
    print(head)
    targets = (f"{'targets':<9} {'':>8} {'':>7}  {'':<24} {'':>7} {'':>7} {'':>7}  "
               f"{'>= 0.90':<13} {'>= 0.75':<13} {'>= 0.95 (f)':<13} {'>= 0.85':<13} {'<= 30 s':<14}")
    print(targets)
    for result in results:
        f = result["figures"]

        def cell(key: str, spec: str, suffix: str = "", f: dict[str, Any] = f) -> str:
            text = fmt(f[key], spec, suffix)
            return f"{text} {mark(f['targets'][key])}" if key in f["targets"] else text

        path = short_path(f["oracle_path"]) if f["oracle_path"] else "-"
        print(f"{result['topology']:<9} {format_size(result['size']):>8} {fmt(f['oracle_mbps'], '.2f'):>7}  "
              f"{path[:24]:<24} {fmt(f['direct_mbps'], '.2f'):>7} {fmt(f['cold_mbps'], '.2f'):>7} "
              f"{fmt(f['warm_mbps'], '.2f'):>7}  {cell('warm_over_oracle', '.2f'):<13} "
              f"{cell('cold_over_oracle', '.2f'):<13} {cell('warm_over_direct', '.2f'):<13} "
              f"{cell('chain_over_hop', '.2f'):<13} {cell('cold_seconds_to_90pct', '.1f', ' s'):<14}")
    checks = [c for r in results for c in r["figures"]["targets"].values()]
    print(f"targets: {checks.count(True)} met, {checks.count(False)} missed, {checks.count(None)} not measured")


class Stopped(Exception):
    """A stopping signal (SIGTERM, SIGHUP) arrived: the benchmark unwinds, every testbed comes down."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


async def bench(args: argparse.Namespace, cases: list[Case], settings: Settings, say: Callable[[str], None]
                ) -> list[dict[str, Any]]:
    out: Path = args.out
    payloads = Payloads(out / "payloads")
    results: list[dict[str, Any]] = []
    try:
        for case in cases:
            say(f"== {case.name}: {case.tests}" + (f" (seed {case.seed})" if case.seed is not None else ""))
            say(f"   {len(case.vertices)} vertices, {len(case.edges())} edges; source {case.source}, "
                f"destination {case.dest}; topology saved in {out / case.name / 'topology.toml'}")
            result = await run_case(case, settings, out, payloads, say)
            results.append(result)
            (out / case.name / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    finally:
        shutil.rmtree(out / "payloads", ignore_errors=True)
    return results


def parse_inflight(text: str) -> int | None:
    if text == "default":
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("--max-inflight must be at least 1, or 'default'")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topologies", help=f"comma-separated, of {', '.join(CASES)} (default: all of them, or "
                        "none with --random)")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also N seeded random scenarios of <=8 depots (bench/testbed_scenarios.py)")
    parser.add_argument("--size", help="the file of every run (default: about 40 s at the oracle's predicted rate)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of direct, cold and warm (default 3)")
    parser.add_argument("--max-inflight", type=parse_inflight, default=argparse.SUPPRESS, metavar="N|default",
                        help="blocks in flight per hop (default 2, the seed's setting, and lnet-send's rule for the "
                        "random scenarios); 'default': lnet-send's rule")
    parser.add_argument("--block-size", default="1MiB")
    parser.add_argument("--max-paths", type=int, default=argparse.SUPPRESS, dest="lnet_max_paths", metavar="N",
                        help="lnet-send --max-paths of the cold and warm runs, always passed (default 1: does lnet "
                        f"find the best single chain; the random scenarios: lnet-send's own, {DEFAULT_MAX_PATHS}); the "
                        "oracle and direct are single paths")
    parser.add_argument("--seed", type=int, help=f"seed of the generated topologies ({DEFAULT_SEED}) and of the random "
                        "scenarios (default: a fresh one, printed)")
    add_only_arg(parser)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "lnet-bench-pathchoice")
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny sizes, one run")
    parser.add_argument("--list", action="store_true", help="print the topologies (TOML) and their design figures")
    parser.add_argument("--resimulate", type=Path, metavar="RESULTS",
                        help="run nothing on the testbed: the simulator's side of the random scenarios of a saved "
                        "bench/results/pathchoice-random-*.json again with this version's simulator, beside the "
                        "testbed's figures saved there (the two compared scenario by scenario)")
    parser.add_argument("--simulate-only", action="store_true",
                        help="with --random: run nothing on the testbed, only the simulator's side of each scenario "
                        "(the same scaling, sizes and settings), and print its distribution: a cheap look at many "
                        "scenarios of the testbed's shapes before a testbed run")
    parser.add_argument("--no-end-game", action="store_true",
                        help="with --resimulate: the simulator without the relay's end game (RelayConfig.end_game)")
    parser.add_argument("--no-fill-rule", action="store_true",
                        help="with --resimulate or --simulate-only: the scheduler not told the bytes left, so it "
                        "takes a path whose fill ends after the transfer (the rule before 2026-12-07, to compare)")
    parser.add_argument("--no-route-blame", action="store_true",
                        help="with --resimulate or --simulate-only: a trial shares a loss among its newcomers by "
                        "their shortfalls alone, not first among those the round trips place on the set's links (the "
                        "rule before 2026-12-07)")
    parser.add_argument("--exact-rtts", action="store_true",
                        help="with --resimulate or --simulate-only: the scheduler's round trips are the links' "
                        "delays alone, without the hosts' own time the testbed's carry (the model before 2026-12-07)")
    parser.add_argument("--max-min", action="store_true",
                        help="with --resimulate or --simulate-only: the simulator shares a full link max-min, every "
                        "stream alike, not favouring streams of short round trips as the testbed's TCP does (the model "
                        "before 2026-12-08)")
    parser.add_argument("--figures", type=Path, metavar="OUT", help="run nothing: recompute the figures and the table "
                        "from an earlier run's --out directory (its pathchoice.json), with this version's rules")
    args = parser.parse_args(argv)
    check_args(parser, args, CASES)
    given = vars(args)
    args.random_max_paths = given.get("lnet_max_paths", DEFAULT_MAX_PATHS)
    args.lnet_max_paths = given.get("lnet_max_paths", 1)
    return args


def add_only_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", metavar="I,J", help="with --random N: only these of its scenarios, by index (the "
                        "r-number of a scenario; e.g. --only 2,20 to run again the two that missed)")


def parse_only(text: str | None, count: int) -> list[int] | None:
    """--only's indices, each one of the first ``count`` random scenarios' (None: all of them)."""
    if text is None:
        return None
    if not count:
        raise ValueError("--only needs --random N")
    allowed = ts.small_indices(count)
    try:
        only = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--only: comma-separated scenario indices, not {text!r}") from None
    outside = [i for i in only if i not in allowed]
    if outside or not only:
        raise ValueError(f"--only: {', '.join(map(str, outside)) or 'nothing'} is not among --random {count}'s "
                         f"scenarios ({', '.join(map(str, allowed))})")
    return only


def random_indices(args: argparse.Namespace) -> list[int]:
    """The random scenarios to run: the first --random N, or those of them --only names."""
    return args.only if args.only is not None else ts.small_indices(args.random)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace, cases: Iterable[str]) -> None:
    """The checks this benchmark and bench/multipath.py share: --runs, --topologies, --random and its seed (a fresh
    one unless given), --max-inflight (the named topologies' default 2, the random scenarios' lnet-send's rule),
    the sizes."""
    names = list(cases)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.random < 0:
        parser.error("--random must not be negative")
    if args.topologies is None:
        args.topologies = "" if args.random else ",".join(names)
    args.random_seed = (args.seed if args.seed is not None else ts.fresh_seed()) if args.random else None
    given = vars(args)
    args.random_max_inflight = given.get("max_inflight")  # None: lnet-send's rule
    args.max_inflight = given.get("max_inflight", 2)
    try:
        args.only = parse_only(args.only, args.random)
    except ValueError as exc:
        parser.error(str(exc))
    unknown = [name for name in args.topologies.split(",") if name and name not in names]
    if unknown:
        parser.error(f"unknown topologies: {', '.join(unknown)} (choose from {', '.join(names)})")
    try:
        parse_size(args.block_size)
        if args.size is not None:
            parse_size(args.size)
    except ValueError as exc:
        parser.error(str(exc))


def describe(case: Case, inflight: int) -> Iterator[str]:
    ranked, figures = _design(case, inflight)
    yield f"== {case.name} ({case.family}): {case.tests}"
    yield case.toml.rstrip()
    yield f"# design figures at {inflight} in flight (Mbit/s): " + ", ".join(
        f"{u}->{v} {m:.1f}" for (u, v), m in figures.items())
    yield "# widest by design: " + "; ".join(f"{' -> '.join(p)} {w:.1f}" for p, w in ranked[:WIDEST])


async def until_signalled(job: Awaitable[T]) -> T:
    """``job``'s result; a stopping signal (SIGTERM, SIGHUP) raises ``Stopped`` in it, so that it unwinds and every
    testbed comes down (Ctrl-C does the same as KeyboardInterrupt)."""
    outcome: list[T] = []
    async with trio.open_nursery() as nursery:
        async def stop_on_signal(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                task_status.started()
                async for signum in signals:
                    raise Stopped(signal.Signals(signum).name)

        async def run() -> None:
            outcome.append(await job)
            nursery.cancel_scope.cancel()

        await nursery.start(stop_on_signal)
        nursery.start_soon(run)
    return outcome[0]


async def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    settings = Settings.from_args(args)
    named_seed = args.seed if args.seed is not None else DEFAULT_SEED
    cases = [CASES[name](named_seed) for name in args.topologies.split(",") if name]
    random_settings = replace(settings, inflight=args.random_max_inflight, max_paths=args.random_max_paths)
    if args.random:
        rerun = rerun_command("pathchoice", argv, args.random_seed)
        print(f"random scenarios: seed {args.random_seed} (rerun: {rerun})", flush=True)
    rcs = [ts.random_case(args.random_seed, index) for index in random_indices(args)]
    if args.list:
        for case in cases:
            print("\n".join(describe(case, settings.design_inflight)), end="\n\n")
        for rc in rcs:
            print(f"== {rc.name}: {rc.describe()}\n{rc.toml}")
        return 0
    if args.figures is not None:
        return refigure(args.figures)
    if args.resimulate is not None:
        return resimulate(args.resimulate, SimVariant.of(args))
    if args.simulate_only:
        return simulate_only(rcs, random_settings, SimVariant.of(args))
    if os.geteuid() != 0:
        print("this benchmark needs root (network namespaces for the testbed)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(text, flush=True)

    code = commit()  # now: the code that runs, whatever is committed meanwhile
    estimate = estimate_seconds(cases, settings)
    if rcs:
        estimate += estimate_random_seconds(rcs, [simulate_random(rc, random_settings) for rc in rcs], random_settings)
    names = [c.name for c in cases] + [f"{len(rcs)} random (seed {args.random_seed})"] * bool(rcs)
    say(f"path choice: {', '.join(names)}; about {estimate / 60:.0f} minutes; results in {args.out}")
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    if cases:
        results.extend(await until_signalled(bench(args, cases, settings, say)))
    rows: list[dict[str, Any]] = []
    if rcs:
        rows.extend(await until_signalled(bench_random(rcs, random_settings, args.out, say)))
    document = {"bench": "pathchoice", "args": {k: str(v) for k, v in vars(args).items()},
                "minutes": (time.monotonic() - started) / 60, "topologies": results}
    (args.out / "pathchoice.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    if results:
        print_table(results, settings)
    print(f"\nsaved {args.out / 'pathchoice.json'} ({document['minutes']:.1f} minutes)")
    if rows:
        summary = print_random(rows, say)
        random_document = {"bench": "pathchoice", "command": " ".join(["bench/pathchoice.py", *(argv or sys.argv[1:])]),
                           "commit": code, "minutes": document["minutes"], "block": settings.block,
                           "inflight": random_settings.inflight or "default", "max_paths": random_settings.max_paths,
                           "runs": settings.runs, "quick": settings.quick}
        data, picture = save_random("pathchoice", args.random_seed, rows, summary, RANDOM_RATIOS, random_document)
        say(f"saved {data} and {picture}")
        print(json.dumps({"bench": "pathchoice-random", "seed": args.random_seed, "summary": summary}, default=str))
    line = {"bench": "pathchoice", "block": settings.block, "inflight": settings.inflight or "default",
            "max_paths": settings.max_paths, "runs": settings.runs,
            "topologies": {r["topology"]: r["figures"] for r in results}}
    if results:
        print(json.dumps(line, default=str))
    return 1 if failures([*results, *rows]) else 0


def failures(results: Iterable[dict[str, Any]]) -> int:
    """The runs that failed; a pinned run stopped as too slow to be the oracle (--random) is no failure."""
    return sum(1 for r in results for run in [*r["runs"], *r["widest"]] if not run["ok"] and not run.get("stopped_s"))


def commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def saved_settings(document: dict[str, Any], max_paths: int = 1) -> Settings:
    """The settings a saved random run (of this benchmark or bench/multipath.py) was made with; one run each."""
    block = document["block"]
    inflight = None if document["inflight"] == "default" else int(document["inflight"])
    return Settings(block, parse_size(block), inflight, 1, bool(document["quick"]), None, max_paths)


def resimulate(saved: Path, variant: SimVariant = SimVariant()) -> int:
    """The simulator's side of a saved random run again, with this version's simulator and the run's settings and
    sizes, beside the testbed's figures saved with it: their agreement, scenario by scenario and as a
    distribution. Needs no root: nothing runs on the testbed."""
    try:
        document = json.loads(saved.read_text())
        rows = document["scenarios"]
        settings = saved_settings(document, int(document["max_paths"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read a random path-choice run in {saved}: {exc}", file=sys.stderr)
        return 2
    print(f"{saved}: {len(rows)} scenarios of seed {document.get('seed')} measured at {document.get('commit')}; "
          f"the simulator of this version{'' if variant == SimVariant() else f' ({variant})'}")
    for row in rows:
        rc = ts.random_case(int(row["seed"]), int(row["index"]))
        case = case_of(rc)
        run_settings = replace(settings, size=int(row["size"]))
        row["sim_run"] = simulate_random(rc, run_settings, variant)
        row.update(random_figures(case, rc, row))
    print_random(rows, print)
    return 0


def simulate_only(rcs: Sequence[ts.RandomCase], settings: Settings, variant: SimVariant = SimVariant()) -> int:
    """The simulator's side of ``rcs`` alone (``--simulate-only``): each scenario's ratios, then their median and
    10th percentile, by kind too."""
    sides: list[dict[str, Any]] = []
    for rc in rcs:
        scenario_ = rc.scenario
        sim = simulate_random(rc, settings, variant)
        case = case_of(rc)
        direct_best = case.direct_best or sim["oracle_path"] == [case.source, case.dest]
        pinned = {tuple(p["path"]): p["mbps"] for p in sim["pinned"]}
        side = random_ratios(case, rc, sim_figures(sim), pinned, direct_best)
        side["kind"] = scenario_.kind
        sides.append(side)
        print(f"{rc.name:<6} {scenario_.kind:<9} {scenario_.depots:>2} depots {sim['size'] // 2**20:>4} MiB  "
              + "  ".join(f"{label} {'-' if side[key] is None else format(side[key], '.2f')}"
                          for key, label in RANDOM_RATIOS.items()), flush=True)
    print(f"\nthe simulator alone, {len(sides)} scenarios:")
    for key, label in RANDOM_RATIOS.items():
        values = [side[key] for side in sides if side[key] is not None]
        if values:
            by_kind = {kind: [side[key] for side in sides if side["kind"] == kind and side[key] is not None]
                       for kind in dict.fromkeys(side["kind"] for side in sides)}
            print(f"{label:<28} n {len(values):>3}  median {statistics.median(values):.2f}  p10 {ts.p10(values):.2f}  "
                  + "  ".join(f"{kind} {statistics.median(v):.2f}/{ts.p10(v):.2f}" for kind, v in by_kind.items() if v))
    return 0


def refigure(out: Path) -> int:
    """The figures, table and JSON line of the run saved in ``out``, recomputed from its measurements."""
    try:
        document = json.loads((out / "pathchoice.json").read_text())
        saved = document["args"]
        inflight = None if saved["max_inflight"] == "None" else int(saved["max_inflight"])
        settings = Settings(saved["block_size"], parse_size(saved["block_size"]), inflight, int(saved["runs"]),
                            saved["quick"] == "True", None, int(saved.get("lnet_max_paths", 1)))
        seed = DEFAULT_SEED if saved["seed"] == "None" else int(saved["seed"])
        results = document["topologies"]
        for result in results:
            result["figures"] = figures_of(CASES[result["topology"]](seed), result)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read a path-choice run in {out}: {exc}", file=sys.stderr)
        return 2
    print_table(results, settings)
    line = {"bench": "pathchoice", "block": settings.block, "inflight": settings.inflight or "default",
            "max_paths": settings.max_paths, "runs": settings.runs,
            "topologies": {r["topology"]: r["figures"] for r in results}}
    print(json.dumps(line, default=str))
    return 0


def interrupted(exc: BaseException) -> str | None:
    """Ctrl-C or a stopping signal, bare or inside the exception group of a nursery it cancelled: its name."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            name = interrupted(inner)
            if name is not None:
                return name
        return None
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    if isinstance(exc, Stopped):
        return exc.signal_name
    return None


if __name__ == "__main__":
    try:
        code = trio.run(main)
    except BaseException as exc:
        name = interrupted(exc)
        if name is None:
            raise
        print(f"stopped ({name}): every testbed is down; the reports so far are in --out", file=sys.stderr)
        code = 130
    sys.exit(code)
