"""The path set beside the primary (theory of operation, 12, in ``lnet.scheduler``'s docstring): which paths
join it, the trial a join is on, which leave, and the bans that keep a path that did not add out.

A part of the decision loop, pure like it: ``PathSet`` keeps the extras (the paths run beside the primary), their
trial and the bans, and reads the primary, the memory and the measured graph from the loop it belongs to, through
``PathSetLoop`` (the ``PathScheduler`` has it; this module does not import the loop). What the model predicts of a
set is ``_paths.py``'s; the loop turns a change of the set into a decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import networkx as nx

from ._attempts import PathAttempt, _Attempt
from ._config import SchedulerConfig
from ._memory import Edge, EdgeMemory
from ._paths import Path, extend_set, keeps_adding, set_total, shown_rate, shown_total, trial_keeps
from ._probing import apply_priors
from ._widest import THROUGHPUT, edges_of, path_throughput

SILENT_TRIAL_ROUNDS = 3
"""A trial whose newcomer has a hop that never reported is judged at most this many ``min_attempt_s`` after the
join, instead of at one: a hop runs its first copies side by side, and each takes depth x block / rate (16 copies
of 4 MiB over 37 Mbit/s: 14.5 s), so a scout that carried most of the set's rate was judged silent and banned."""

__all__ = ["PathSet", "PathSetLoop"]


class PathSetLoop(Protocol):
    """What the path set uses of the decision loop (``_loop.PathScheduler`` has it): its settings, ends, vertices,
    memory and round trips, the set in use, when each of its edges joined it and the attempts that ended (both
    updated by the set as paths join and leave), the time of the latest tick, and the graphs it believes
    (``carried``: the set's unweighted hops at what its own copies carried)."""

    @property
    def config(self) -> SchedulerConfig: ...

    @property
    def src(self) -> str: ...

    @property
    def dst(self) -> str: ...

    @property
    def vertices(self) -> Sequence[str]: ...

    @property
    def memory(self) -> EdgeMemory: ...

    @property
    def rtt_s(self) -> Mapping[str, float]: ...

    @property
    def peer_rtt_s(self) -> Mapping[Edge, float]: ...

    @property
    def current_path(self) -> Path | None: ...

    @property
    def current_paths(self) -> tuple[Path, ...]: ...

    @property
    def edge_since(self) -> dict[Edge, float]: ...

    @property
    def history(self) -> list[PathAttempt]: ...

    @property
    def now(self) -> float: ...

    def graph(self, *, with_aging: bool = True) -> nx.DiGraph: ...

    def measured_graph(self) -> nx.DiGraph: ...

    def pays_fill(self, path: Path) -> bool: ...

    def crosses(self, path: Path, paths: Sequence[Path]) -> bool: ...

    def carried(self, graph: nx.DiGraph, *, judging: bool = False) -> nx.DiGraph: ...


@dataclass(slots=True)
class _Ban:
    """A path that joined the set and did not add (or stopped adding), kept out until it is predicted wider.

    ``width`` is its predicted rate when it left, raised to the highest seen during the ``min_attempt_s`` after:
    the blocks it still had in flight report after it left, and a figure from them is no news of the path.
    """

    since: float
    width: float
    beside: Path
    """The primary when it left: what the memory keeps it beside (``PathSet._remember_ban``)."""


@dataclass(slots=True)
class _Trial:
    """Paths that joined the set together and have not yet shown that they add rate."""

    predicted: dict[Path, float]
    """Each newcomer and its predicted rate when it joined; one leaves the trial when it leaves the set."""
    since: float
    baseline: float
    """The set's measured total just before they joined (at a warm start, the memory's figure for the primary)."""


class PathSet:
    """The paths one ``PathScheduler`` runs beside its primary, their trial, and the paths banned from the set."""

    def __init__(self, loop: PathSetLoop) -> None:
        self.loop = loop
        self.extras: list[_Attempt] = []
        """The paths beside the primary (``PathScheduler._attempt``), in the order they joined."""
        self.trial: _Trial | None = None
        """The newcomers that have not yet shown that they add rate."""
        self.bans: dict[Path, _Ban] = {}
        """Paths that joined and did not add (or stopped adding), with their predicted width when they left."""

    @property
    def on_trial(self) -> Mapping[Path, float]:
        """The newcomers still on trial, each with its predicted rate (none when no trial is open)."""
        return self.trial.predicted if self.trial is not None else {}

    def edges(self) -> set[Edge]:
        return {edge for path in self.loop.current_paths for edge in edges_of(path)}

    def would_gain(self, primary: Path) -> bool:
        """Whether moving the primary to ``primary`` is worth it for the whole set. A path of the set (a swap) or
        a set of one: always (the single-path rules decided). Otherwise the move ends the other paths, so the set
        built greedily from the new primary must be predicted ``hysteresis`` above the current set's total: a new
        primary a little wider than the old one is no reason to stop a second path."""
        if not self.extras or primary in self.loop.current_paths:
            return True
        graph = self.loop.measured_graph()
        config, banned = self.loop.config, self.banned_edges()
        src, dst = self.loop.src, self.loop.dst
        extras = extend_set(graph, src, dst, [primary], config.max_paths, config.path_margin, banned)
        candidate = [primary, *extras]
        current = set_total(self.loop.carried(graph), self.loop.current_paths)
        return set_total(graph, candidate) > current * (1 + self.loop.config.hysteresis)

    def running_beside(self, primary: Path) -> list[Path]:
        """The paths of the set a move of the primary onto ``primary`` (new to the set) keeps running: those of the
        set built greedily from it (``extend_set``, as ``would_gain`` predicts it) that run now, then newcomers
        still on trial that share no edge with them (their trial goes on: a figure from a newcomer's first copies
        is no reason to end it), up to ``max_paths`` - 1 in all; none unless one of them has passed its trial
        (newcomers still on trial are no baseline to judge by)."""
        config = self.loop.config
        built = extend_set(
            self.loop.measured_graph(), self.loop.src, self.loop.dst, [primary], config.max_paths,
            config.path_margin, self.banned_edges(),
        )
        kept = [path for path in built if path in self.loop.current_paths]
        on_trial = self.on_trial
        taken = {edge for path in [primary, *kept] for edge in edges_of(path)}
        for path in on_trial:
            if len(kept) < config.max_paths - 1 and path not in kept and not taken & set(edges_of(path)):
                kept.append(path)
                taken.update(edges_of(path))
        return kept if any(path not in on_trial for path in kept) else []

    def leave_all_but(self, now: float, kept: Sequence[Path]) -> None:
        """The extras not in ``kept`` leave, unbanned (a move of the primary ends them, not their own rate)."""
        for extra in [extra for extra in self.extras if extra.path not in kept]:
            self._leave(now, extra, ban=False)

    def take_settled(self) -> _Attempt:
        """The first extra that has passed its trial, out of the extras: the primary of a move whose old primary
        left (``running_beside`` keeps one)."""
        settled = next(extra for extra in self.extras if extra.path not in self.on_trial)
        self.extras.remove(settled)
        return settled

    def join_beside(self, now: float, path: Path, predicted: float) -> None:
        """``path`` joins the set as it now is, on trial from now with the newcomers still on trial (``judge_trial``),
        against what the measured graph gives the paths that passed theirs."""
        on_trial = dict(self.on_trial)
        settled = [p for p in self.loop.current_paths if p not in on_trial]
        self._admit(now, {**on_trial, path: predicted}, [path], set_total(self.loop.measured_graph(), settled))

    def _admit(self, now: float, trial: dict[Path, float], paths: Sequence[Path], baseline: float) -> None:
        """``paths`` join the set, and ``trial`` (they and any newcomers still on theirs) is on trial from now
        against ``baseline``."""
        for path in paths:
            self.extras.append(_Attempt(path, now, "join"))
            self.loop.edge_since.update((edge, now) for edge in edges_of(path))
        self.trial = _Trial(trial, now, baseline)

    def join(self, now: float) -> bool:
        """Add every path the measured graph predicts to add, greedily (``_paths.extend_set``: the widest path
        edge-disjoint from the set and from banned paths, while it adds the margin of the growing set's total), up
        to ``max_paths``, all at once on one trial (``judge_trial``)."""
        if self.trial is not None:
            return False
        if len(self.extras) + 1 >= self.loop.config.max_paths:
            return self._swap(now)
        graph = self.loop.measured_graph()
        paths = self.loop.current_paths
        joined = extend_set(
            graph, self.loop.src, self.loop.dst, paths, self.loop.config.max_paths, self.loop.config.path_margin,
            self.banned_edges(),
        )
        joined = [path for path in joined if self.loop.pays_fill(path)]
        if not joined:
            return False
        self._admit(now, {path: path_throughput(graph, path) for path in joined}, joined, set_total(graph, paths))
        return True

    def _swap(self, now: float) -> bool:
        """A full set trades its narrowest extra for a path new to it when the set without that extra, extended
        greedily again (``extend_set``), is predicted ``path_margin`` above the set's measured total: the extra
        leaves (no ban: it added, only less) and the newcomer joins on trial. Without it a slow path that joined
        first, while a wider one was still unmeasured, held its place for the whole transfer."""
        if not self.extras:
            return False
        config = self.loop.config
        graph = self.loop.measured_graph()
        carried = self.loop.carried(graph)
        narrowest = min(self.extras, key=lambda extra: path_throughput(carried, extra.path))
        rest = [path for path in self.loop.current_paths if path != narrowest.path]
        joined = extend_set(
            graph, self.loop.src, self.loop.dst, rest, config.max_paths, config.path_margin,
            {*self.banned_edges(), *edges_of(narrowest.path)},
        )
        joined = [path for path in joined if self.loop.pays_fill(path)]
        if not joined:
            return False
        current = set_total(carried, self.loop.current_paths)
        if not set_total(graph, [*rest, *joined]) > current * (1 + config.path_margin):
            return False
        self._leave(now, narrowest, ban=False)
        self._admit(now, {path: path_throughput(graph, path) for path in joined}, joined, set_total(graph, rest))
        return True

    def scout(self, now: float) -> bool:
        """A cold start's scouts (theory of operation, 14): beside the first path, up to ``max_paths`` - 2 paths
        through one depot each, the widest by the round trips' guesses (``_probing.apply_priors``), join on one trial
        (one depot each: they are edge-disjoint, and a guess over many hops is a guess many times over). They join
        once every hop of the first path has reported, so that the trial has that path's rate alone to judge them
        by: a scout that takes its rate from the first path (one physical route under both) leaves, banned. What
        they carry is measured as the transfer's own blocks, at its depth, on every hop at once: far more than
        probes learn in the same seconds. A scout that adds less than the margin later leaves like any extra
        (``drop_idle``), and the end game takes the blocks a slow one holds at the end (client.md)."""
        if not self.loop.rtt_s or len(self.extras) + 2 >= self.loop.config.max_paths or self.trial is not None:
            return False  # no guesses to rank them by, or the set is full or on trial already
        guessed = self.loop.graph()
        apply_priors(guessed, self.loop.memory, self.loop.src, self.loop.rtt_s, self.loop.peer_rtt_s)
        taken = {edge for path in self.loop.current_paths for edge in edges_of(path)} | self.banned_edges()

        def guess(u: str, v: str) -> float:
            attrs = guessed.get_edge_data(u, v) or {}
            return -1.0 if (u, v) in taken else float(attrs.get(THROUGHPUT, -1.0))

        src, dst = self.loop.src, self.loop.dst
        ranked = sorted(
            ((min(guess(src, d), guess(d, dst)), d) for d in self.loop.vertices if d not in (src, dst)),
            key=lambda pair: (-pair[0], self.loop.vertices.index(pair[1])),
        )
        scouts: list[Path] = []
        # One place of the set stays free for what measurement finds: a scout that stays (it adds) would otherwise
        # hold its place against a better path found later (the loop never swaps an extra that adds).
        for width, depot in ranked[: self.loop.config.max_paths - 2 - len(self.extras)]:
            if width > 0:
                scouts.append((self.loop.src, depot, self.loop.dst))
        if not scouts:
            return False
        measured = self.loop.measured_graph()
        # the first path alone; one that has not reported yet counts as nothing (its scouts are judged on what
        # they carry, and one that adds less than the margin leaves by drop_idle)
        baseline = shown_total(measured, self.loop.current_paths)
        self._admit(now, {path: path_throughput(guessed, path) for path in scouts}, scouts, baseline)
        return True

    def judge_trial(self, now: float) -> bool:
        """The newcomers joined together ``min_attempt_s`` ago: those that did not add rate (``_paths.trial_keeps``:
        half the margin of the set's measured total before they joined, net of what they took from the others)
        shared a bottleneck with the set, or were no news. They leave, banned until predicted wider; the rest stay.
        Whether any left. Each is judged by what its copies carried, those begun in its hops' warm-up included, and
        a trial with a hop that has not reported yet waits for it, up to ``SILENT_TRIAL_ROUNDS`` trials' time."""
        trial = self.trial
        if trial is None or now - trial.since < self.loop.config.min_attempt_s:
            return False
        newcomers = [extra for extra in self.extras if extra.path in trial.predicted]
        patience = SILENT_TRIAL_ROUNDS * self.loop.config.min_attempt_s
        if any(newcomer.silent for newcomer in newcomers) and now - trial.since < patience:
            return False  # a hop's first copies may take longer than a trial: silence is not yet slowness
        self.trial = None
        if not newcomers:
            return False
        # what the set's own copies carried, those begun in a hop's warm-up included (``carried``): a scout whose
        # copies take longer than the warm-up has shown only those by now, and counted as carrying nothing
        graph = self.loop.carried(self.loop.measured_graph(), judging=True)
        total = shown_total(graph, self.loop.current_paths)
        rates = []
        for newcomer in newcomers:
            rate = shown_rate(graph, newcomer.path)
            if newcomer.silent:
                # A hop that never reported since the join: what the graph says of it is still the probe's figure.
                total -= rate
                rate = 0.0
            rates.append(rate)
        predicted = [trial.predicted[newcomer.path] for newcomer in newcomers]
        settled = [path for path in self.loop.current_paths if path not in trial.predicted]
        crossing = [self.loop.crosses(newcomer.path, settled) for newcomer in newcomers]
        keep = trial_keeps(
            trial.baseline, total - sum(rates), rates, predicted, self.loop.config.path_margin, crossing
        )
        leaving = [newcomer for newcomer, kept in zip(newcomers, keep, strict=True) if not kept]
        for newcomer in leaving:
            self._leave(now, newcomer, ban=True)
        return bool(leaving)

    def drop_idle(self, now: float) -> bool:
        """Extras whose measured rate fell below half the margin of the others' leave, banned like a failed
        trial (what made them slow, often the set itself, will not change while they are out)."""
        graph = self.loop.carried(self.loop.measured_graph(), judging=True)  # as the trial judged them
        dropped = False
        on_trial = self.on_trial
        for extra in list(self.extras):
            if extra.path in on_trial:
                continue  # its trial judges it (judge_trial), when its hops have reported
            rate = shown_rate(graph, extra.path)
            others = shown_total(graph, self.loop.current_paths) - rate
            if not keeps_adding(rate, others, self.loop.config.path_margin):
                self._leave(now, extra, ban=True)
                dropped = True
        return dropped

    def drop_broken(self, now: float) -> bool:
        """Extras with a failed hop leave (no ban: the failure's weight of 0 keeps them out until aging)."""
        broken = [
            extra
            for extra in self.extras
            if any(
                (entry := self.loop.memory.entry(*edge)) is not None and entry.failed for edge in edges_of(extra.path)
            )
        ]
        for extra in broken:
            self._leave(now, extra, ban=False)
        return bool(broken)

    def _leave(self, now: float, extra: _Attempt, *, ban: bool) -> None:
        self.extras.remove(extra)
        self.loop.history.append(extra.freeze(now, self.loop.config.streams))
        for edge in edges_of(extra.path):
            self.loop.edge_since.pop(edge, None)
        if self.trial is not None:
            self.trial.predicted.pop(extra.path, None)
            if not self.trial.predicted:
                self.trial = None
        if ban:
            primary = self.loop.current_path
            assert primary is not None  # an extra leaves a set that has a primary
            ban_ = self.bans[extra.path] = _Ban(now, self._ban_width(extra.path) or 0.0, primary)
            self._remember_ban(extra.path, ban_)

    def _ban_width(self, path: Path) -> float | None:
        """A banned path's predicted rate from the memory, aging included (a failed hop counts 0); None when one
        of its edges is unknown (forgotten)."""
        memory = self.loop.memory
        weights = [entry.weight if (entry := memory.entry(*edge)) is not None else None for edge in edges_of(path)]
        return None if None in weights else min(w for w in weights if w is not None)

    def banned_edges(self) -> set[Edge]:
        """The edges of banned paths, after lifting the bans of paths now predicted more than the margin wider
        than when they left (a new measurement, aging, a recovery), or with an edge forgotten. A lower figure
        never lifts a ban: it makes the path no more worth a trial. Reports that arrive in the first
        ``min_attempt_s`` after the path left (its last blocks) only raise the width it is held to."""
        margin = self.loop.config.path_margin
        for path, ban in list(self.bans.items()):
            width = self._ban_width(path)
            settled = self.loop.now - ban.since > self.loop.config.min_attempt_s
            if width is None or (settled and width > ban.width * (1 + margin)):
                del self.bans[path]
                self.loop.memory.forget_overlap(path)
        return {edge for path in self.bans for edge in edges_of(path)}

    def settle_bans(self) -> None:
        """At every tick: paths that left in the last ``min_attempt_s`` are held to the widest figure seen since."""
        for path, ban in self.bans.items():
            width = self._ban_width(path)
            if width is not None and self.loop.now - ban.since <= self.loop.config.min_attempt_s and width > ban.width:
                ban.width = width
                self._remember_ban(path, ban)

    def recall_bans(self, now: float) -> None:
        """What earlier transfers learnt beside the primary (``_remember_ban``), as this transfer's bans: once, when
        the primary is chosen."""
        primary, max_age_s = self.loop.current_path, self.loop.config.age_after_s
        assert primary is not None
        for record in self.loop.memory.overlaps(primary, now=now, max_age_s=max_age_s):
            self.bans.setdefault(record.path, _Ban(record.at, record.width_bps, record.beside))

    def _remember_ban(self, path: Path, ban: _Ban) -> None:
        """Keep a ban in the memory beside the primary, for later transfers: a warm start over the same primary
        then does not pay the trial again (on the testbed's shared bottleneck, a path crossing it twice held
        the set to half its rate for the trial's 10 s, every warm start). It is kept ``age_after_s``, the time
        after which a weight gets its second chance, and lifted in the memory when it is lifted here."""
        self.loop.memory.note_overlap(path, ban.beside, ban.width, ban.since)
