"""What lnet knows of each edge: a smoothed throughput, when it was measured, how often, and whether it failed.

Pure state plus a JSON file: no network, no clock of its own (every call that needs the time takes ``now``, Unix
seconds, so that a memory saved by one process means the same to the next). It must not decide paths; the
decision loop (``_loop.py``) reads it through ``to_graph``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import networkx as nx
import platformdirs

from ._widest import THROUGHPUT

__all__ = [
    "DEFAULT_AGE_AFTER_S",
    "DEFAULT_AGE_MAX_PER_ROUND",
    "DEFAULT_AGE_PERCENT",
    "DEFAULT_SMOOTHING_S",
    "Edge",
    "EdgeEstimate",
    "EdgeMemory",
    "Overlap",
]

log = logging.getLogger(__name__)

Edge = tuple[str, str]

DEFAULT_SMOOTHING_S = 2.0
"""Time constant of the estimate: a sample covering this many seconds of transfer carries 63% of the weight."""
DEFAULT_AGE_AFTER_S = 300.0
DEFAULT_AGE_PERCENT = 20.0
DEFAULT_AGE_MAX_PER_ROUND = 2

_FORMAT = "lnet-edge-memory"
_VERSION = 2
"""2: estimates are per-stream rates (bytes over the seconds each copy took); 1 held busy-time aggregates,
which mean something else, so a version-1 file is ignored like a foreign one."""


@dataclass(frozen=True, slots=True)
class EdgeEstimate:
    """One edge's record.

    ``throughput_bps`` is the smoothed measured estimate (bytes/s of one stream: see ``Measurement``).
    ``boost`` is what aging has multiplied it by
    since (1.0 when fresh); keeping the two apart lets a caller tell a measured weight from a second chance.
    While ``failed`` the weight is 0 and ``throughput_bps`` is the estimate from before the failure, kept so
    that aging can hand it back. ``samples`` counts the measurements behind the estimate (0 for an edge that
    failed before it was ever measured). ``measured_at`` is the Unix time of the last measurement, failure or
    aging.

    ``ceiling_bps`` (per stream, like ``throughput_bps``) is set when the latest sample came from a probe that
    ran beside the transfer on a hop sharing an end with it: such a probe may have seen only what the transfer
    left on a shared link, so the estimate is a floor, and the edge may carry up to the ceiling once the
    transfer moves there (theory of operation, 9). None: the estimate is the edge's own.
    """

    throughput_bps: float
    measured_at: float
    samples: int
    failed: bool = False
    boost: float = 1.0
    ceiling_bps: float | None = None

    @property
    def weight(self) -> float:
        """What the edge counts for in path choice: 0 while failed, else the estimate raised by aging."""
        return 0.0 if self.failed else self.throughput_bps * self.boost

    @property
    def aged(self) -> bool:
        """Whether the weight is a second chance given by aging rather than a measurement."""
        return self.boost != 1.0 and not self.failed


@dataclass(frozen=True, slots=True)
class Overlap:
    """A path that joined a set beside ``beside`` (the set's primary then) and did not add rate, or stopped
    adding: the two share a bottleneck the edge weights cannot show (theory of operation, 12).

    ``width_bps`` is the path's predicted rate (per stream, the weights' unit) when it left; ``at`` is when (Unix
    seconds). A later transfer over the same primary keeps the path out from its first second, as the transfer
    that learnt it did, until the path is predicted wider by the margin or the record is ``age_after_s`` old.
    """

    path: tuple[str, ...]
    beside: tuple[str, ...]
    width_bps: float
    at: float


class EdgeMemory:
    """Edge estimates keyed by ordered vertex pairs, persisted as JSON for the next transfer's warm start, and
    the paths found to share a bottleneck with another (``Overlap``)."""

    def __init__(self, *, smoothing_s: float = DEFAULT_SMOOTHING_S) -> None:
        if not smoothing_s > 0:
            raise ValueError(f"smoothing_s must be positive, not {smoothing_s!r}")
        self.smoothing_s = smoothing_s
        self._edges: dict[Edge, EdgeEstimate] = {}
        self._overlaps: dict[tuple[tuple[str, ...], tuple[str, ...]], Overlap] = {}

    # -- reading ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._edges)

    def __iter__(self) -> Iterator[Edge]:
        return iter(self._edges)

    def entry(self, u: str, v: str) -> EdgeEstimate | None:
        """The whole record of edge ``u -> v``, or None if nothing is known of it."""
        return self._edges.get((u, v))

    def estimate(self, u: str, v: str) -> float | None:
        """The edge's weight in bytes/s: None if unknown, 0.0 while failed."""
        entry = self._edges.get((u, v))
        return None if entry is None else entry.weight

    def snapshot(self) -> dict[Edge, EdgeEstimate]:
        """A copy of every record, for comparisons and reports."""
        return dict(self._edges)

    def overlaps(
        self, beside: Sequence[str] | None = None, *, now: float | None = None, max_age_s: float = math.inf
    ) -> list[Overlap]:
        """The paths remembered not to add beside the path ``beside`` (every record when None), leaving out
        records more than ``max_age_s`` older than ``now``."""
        return [
            record
            for record in self._overlaps.values()
            if (beside is None or record.beside == tuple(beside)) and (now is None or now - record.at <= max_age_s)
        ]

    def to_graph(self, vertices: Iterable[str], *, with_aging: bool = True) -> nx.DiGraph:
        """A full mesh over ``vertices`` (in their order, which breaks ties in ``widest_path``).

        Known edges carry ``throughput`` (0.0 while failed): their weight, or without ``with_aging`` their
        measured estimate. Unknown edges carry nothing and so count as infinitely fast.
        """
        order = list(dict.fromkeys(vertices))
        graph = nx.DiGraph()
        graph.add_nodes_from(order)
        for u in order:
            for v in order:
                if u == v:
                    continue
                entry = self._edges.get((u, v))
                if entry is None:
                    graph.add_edge(u, v)
                else:
                    weight = entry.weight if with_aging or entry.failed else entry.throughput_bps
                    graph.add_edge(u, v, **{THROUGHPUT: weight})
        return graph

    # -- learning -----------------------------------------------------------------------------------------

    def observe(
        self, u: str, v: str, nbytes: int, seconds: float, now: float, *, ceiling_bps: float | None = None
    ) -> EdgeEstimate:
        """Fold in a measurement: ``nbytes`` crossed ``u -> v`` in ``seconds``.

        The estimate is an exponential average weighted by how long the sample ran, so that one long copy
        counts as much as many short ones covering the same time. A success clears a failure and any aging.
        ``ceiling_bps`` marks the sample as a floor (see ``EdgeEstimate.ceiling_bps``): the latest sample's
        ceiling is kept, never below the estimate, and a sample without one clears it.
        """
        if nbytes < 0 or not seconds > 0 or not math.isfinite(seconds):
            raise ValueError(f"a measurement needs nbytes >= 0 and seconds > 0, not {nbytes!r}, {seconds!r}")
        rate = nbytes / seconds
        old = self._edges.get((u, v))
        if ceiling_bps is not None and not (math.isfinite(ceiling_bps) and ceiling_bps >= 0):
            raise ValueError(f"a ceiling must be finite and not negative, not {ceiling_bps!r}")
        old = self._edges.get((u, v))
        if old is None or old.failed or old.samples == 0:
            estimate, samples = rate, 1
        else:
            share = -math.expm1(-seconds / self.smoothing_s)
            estimate, samples = old.throughput_bps + share * (rate - old.throughput_bps), old.samples + 1
        ceiling = None if ceiling_bps is None or ceiling_bps <= estimate else ceiling_bps
        new = EdgeEstimate(estimate, now, samples, ceiling_bps=ceiling)
        self._edges[(u, v)] = new
        return new

    def adopt(self, u: str, v: str, record: EdgeEstimate) -> bool:
        """Take another memory's record of ``u -> v`` (the overlay's shared memory) when this one knows nothing
        of the edge or knows it from before ``record.measured_at``; True when taken. Its own measurements replace
        it as for any record."""
        values = (record.throughput_bps, record.measured_at, record.boost)
        if not all(math.isfinite(x) for x in values) or record.throughput_bps < 0 or record.samples < 0:
            raise ValueError(f"not a usable edge record: {record!r}")
        old = self._edges.get((u, v))
        if old is not None and old.measured_at >= record.measured_at:
            return False
        self._edges[(u, v)] = record
        return True

    def fail(self, u: str, v: str, now: float) -> None:
        """The hop ``u -> v`` failed: its weight is 0 until aging gives it another chance."""
        old = self._edges.get((u, v))
        if old is None:
            self._edges[(u, v)] = EdgeEstimate(0.0, now, 0, failed=True)
        else:
            self._edges[(u, v)] = replace(old, measured_at=now, failed=True, ceiling_bps=None)

    def forget(self, u: str, v: str) -> None:
        """Make the edge unknown again."""
        self._edges.pop((u, v), None)

    def clear(self) -> None:
        self._edges.clear()
        self._overlaps.clear()

    def note_overlap(self, path: Sequence[str], beside: Sequence[str], width_bps: float, at: float) -> Overlap:
        """Remember that ``path`` did not add beside ``beside`` (replacing an earlier record of the pair)."""
        if not (math.isfinite(width_bps) and width_bps >= 0) or not math.isfinite(at):
            raise ValueError(f"an overlap needs a finite width >= 0 and time, not {width_bps!r}, {at!r}")
        record = Overlap(tuple(path), tuple(beside), width_bps, at)
        self._overlaps[(record.path, record.beside)] = record
        return record

    def forget_overlap(self, path: Sequence[str]) -> None:
        """``path`` is worth a trial again, beside any path."""
        for key in [key for key in self._overlaps if key[0] == tuple(path)]:
            del self._overlaps[key]

    def age_stale_weights(
        self,
        now: float,
        *,
        after_s: float = DEFAULT_AGE_AFTER_S,
        percent: float = DEFAULT_AGE_PERCENT,
        max_edges: int = DEFAULT_AGE_MAX_PER_ROUND,
        among: Collection[str] | None = None,
    ) -> list[Edge]:
        """Give stale weights another chance, oldest first, at most ``max_edges`` of them; returns those aged.

        An estimate older than ``after_s`` is raised by ``percent`` and its time renewed (the seed's aging). A
        failed edge gets back its estimate from before the failure, raised the same way, or becomes unknown if
        it never had one. The raise is kept apart from the measured estimate (``EdgeEstimate.boost``) until the
        next measurement replaces both. ``among`` limits aging to edges between those vertices (one transfer's graph).
        Overlaps older than ``after_s`` are forgotten: the path gets its trial again.
        """
        for key in [key for key, record in self._overlaps.items() if now - record.at > after_s]:
            del self._overlaps[key]
        stale = [
            (entry.measured_at, edge)
            for edge, entry in self._edges.items()
            if now - entry.measured_at >= after_s and (among is None or (edge[0] in among and edge[1] in among))
        ]
        stale.sort()
        factor = 1.0 + percent / 100.0
        aged: list[Edge] = []
        for _, edge in stale[: max(0, max_edges)]:
            entry = self._edges[edge]
            if entry.failed and entry.samples == 0:
                del self._edges[edge]
            else:
                self._edges[edge] = replace(entry, measured_at=now, failed=False, boost=entry.boost * factor)
            aged.append(edge)
        return aged

    def seed_from_links(
        self,
        src_vertex: str,
        links: Iterable[Mapping[str, Any]],
        url_to_vertex: Mapping[str, str],
        now: float,
        *,
        depth: tuple[int, int] | None = None,
    ) -> list[Edge]:
        """Learn from a depot's ``GET /v1/status`` ``links``: what ``src_vertex`` measured pushing to its peers.

        Each link ``{to, bytes, seconds, mbps, at, streams}`` is one sample of edge ``src_vertex ->
        url_to_vertex[to]`` (URLs compared without a trailing slash): ``seconds`` is the sum of the pushes' own
        times, so the rate is per stream, the unit the scheduler compares. Links to unknown URLs, malformed
        links, failure-only entries (no ``at``), pushes smaller than ``MIN_WEATHER_BLOCK`` (``block_bytes``),
        and links no newer than what the memory already holds are skipped. ``at`` is clamped to ``now``
        against clock skew. Returns the edges learnt.

        ``depth`` = (fewest, most) blocks in flight a hop, for a transfer whose engine chooses each hop's depth
        (the scheduler's ``min_streams`` and ``streams``): a weight is then what a hop carried at its own depth,
        not ``most`` x a stream (theory of operation, 9). The link's pushes ran ``streams`` at once (1 when the
        depot does not say), so it is learnt as that many streams' worth spread over ``most``, a floor, with
        ``fewest`` streams' worth as its ceiling, as a probe's figure is. As one stream's rate x 16, a probe's
        push over a 3.5 Mbit/s link was weighed at 43 Mbit/s, and a warm start on the emulated Abilene began on
        it (6.5 Mbit/s where direct gives 18).
        """
        vertices = {url.rstrip("/"): vertex for url, vertex in url_to_vertex.items()}
        learnt: list[Edge] = []
        for link in links:
            sample = _link_sample(link)
            if sample is None:
                log.debug("skipping a malformed link from %s: %r", src_vertex, link)
                continue
            url, nbytes, seconds, at = sample
            peer = vertices.get(url.rstrip("/"))
            if peer is None or peer == src_vertex:
                continue
            at = min(at, now)
            known = self._edges.get((src_vertex, peer))
            if known is not None and known.measured_at >= at:
                continue
            ceiling = None
            if depth is not None:
                fewest, most = depth
                at_once = min(max(1.0, _link_streams(link)), float(most))
                ceiling = nbytes / seconds * fewest / most
                seconds *= most / at_once
            self.observe(src_vertex, peer, nbytes, seconds, at, ceiling_bps=ceiling)
            learnt.append((src_vertex, peer))
        return learnt

    # -- persistence --------------------------------------------------------------------------------------

    @staticmethod
    def default_path() -> Path:
        """``edges.json`` in the user's cache directory for lnet."""
        return Path(platformdirs.user_cache_dir("lnet")) / "edges.json"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the memory as JSON, atomically: a reader sees the old file or the new one, never a torn one."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        document = self.document()
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                json.dump(document, stream, indent=1, allow_nan=False)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def document(self) -> dict[str, Any]:
        """The memory as the JSON document ``save`` writes (``from_document`` reads it back)."""
        document: dict[str, Any] = {
            "format": _FORMAT,
            "version": _VERSION,
            "edges": [
                {
                    "from": u,
                    "to": v,
                    "throughput_bps": entry.throughput_bps,
                    "measured_at": entry.measured_at,
                    "samples": entry.samples,
                    "failed": entry.failed,
                    "boost": entry.boost,
                    **({} if entry.ceiling_bps is None else {"ceiling_bps": entry.ceiling_bps}),
                }
                for (u, v), entry in sorted(self._edges.items())
            ],
        }
        if self._overlaps:  # absent when empty, so a file an older lnet wrote is one this lnet writes
            document["overlaps"] = [
                {"path": list(r.path), "beside": list(r.beside), "width_bps": r.width_bps, "at": r.at}
                for _, r in sorted(self._overlaps.items())
            ]
        return document

    @classmethod
    def from_document(cls, document: object, *, smoothing_s: float = DEFAULT_SMOOTHING_S) -> EdgeMemory:
        """A memory from ``document`` (as ``document()`` gives it); ValueError, TypeError or KeyError if it is not
        one (``load`` reports those and starts empty instead)."""
        memory = cls(smoothing_s=smoothing_s)
        memory._edges, overlaps = _parse(document)
        memory._overlaps = {(record.path, record.beside): record for record in overlaps}
        return memory

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, smoothing_s: float = DEFAULT_SMOOTHING_S) -> EdgeMemory:
        """Read a memory written by ``save``.

        A missing file is a first run: an empty memory. A corrupt or foreign file is reported with a warning
        and ignored (an empty memory): losing the weather is a slower start, never a failed transfer.
        """
        memory = cls(smoothing_s=smoothing_s)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return memory
        except (OSError, UnicodeDecodeError) as error:
            log.warning("ignoring the edge memory %s: cannot read it (%s)", path, error)
            return memory
        try:
            memory = cls.from_document(json.loads(text), smoothing_s=smoothing_s)
        except (ValueError, TypeError, KeyError) as error:
            log.warning("ignoring the edge memory %s: not an lnet edge memory (%s)", path, error)
        return memory


def _finite(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return float(value)


def _parse(document: object) -> tuple[dict[Edge, EdgeEstimate], list[Overlap]]:
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise ValueError("no lnet-edge-memory format tag")
    if document.get("version") != _VERSION:
        raise ValueError(f"unsupported version {document.get('version')!r}")
    edges: dict[Edge, EdgeEstimate] = {}
    for item in document["edges"]:
        u, v = item["from"], item["to"]
        samples, failed = item["samples"], item["failed"]
        if not (isinstance(u, str) and isinstance(v, str) and isinstance(failed, bool)):
            raise ValueError(f"malformed edge {item!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"malformed sample count {samples!r}")
        throughput = _finite(item["throughput_bps"])
        if throughput < 0:
            raise ValueError(f"negative throughput {throughput!r}")
        boost = _finite(item.get("boost", 1.0))
        if boost <= 0:
            raise ValueError(f"non-positive boost {boost!r}")
        ceiling = item.get("ceiling_bps")
        if ceiling is not None and (ceiling := _finite(ceiling)) < 0:
            raise ValueError(f"negative ceiling {ceiling!r}")
        edges[(u, v)] = EdgeEstimate(throughput, _finite(item["measured_at"]), samples, failed, boost, ceiling)
    return edges, [_parse_overlap(item) for item in document.get("overlaps", [])]


def _parse_overlap(item: object) -> Overlap:
    """An ``overlaps`` entry (absent from files older than the record; an older lnet ignores the key)."""
    if not isinstance(item, dict):
        raise ValueError(f"malformed overlap {item!r}")
    path, beside = item["path"], item["beside"]
    for vertices in (path, beside):
        if not isinstance(vertices, list) or len(vertices) < 2 or not all(isinstance(v, str) for v in vertices):
            raise ValueError(f"malformed overlap path {vertices!r}")
    width = _finite(item["width_bps"])
    if width < 0:
        raise ValueError(f"negative overlap width {width!r}")
    return Overlap(tuple(path), tuple(beside), width, _finite(item["at"]))


MIN_WEATHER_BLOCK = 256 * 1024
"""Depot weather from pushes smaller than this is not learnt: such a copy is mostly slow start and round trips,
and says little of what a transfer's blocks would get."""


def _link_streams(link: Mapping[str, Any]) -> float:
    """How many pushes ran at once on a link (1 when it does not say, or says nonsense)."""
    streams = link.get("streams")
    if isinstance(streams, int | float) and not isinstance(streams, bool) and math.isfinite(streams):
        return float(streams)
    return 1.0


def _link_sample(link: object) -> tuple[str, int, float, float] | None:
    if not isinstance(link, Mapping):
        return None
    block = link.get("block_bytes")
    if isinstance(block, int | float) and not isinstance(block, bool) and block < MIN_WEATHER_BLOCK:
        return None
    try:
        url, nbytes, seconds, at = link["to"], link["bytes"], link["seconds"], _finite(link["at"])
        seconds = _finite(seconds)
    except (KeyError, ValueError):
        return None
    if not isinstance(url, str) or isinstance(nbytes, bool) or not isinstance(nbytes, int):
        return None
    if nbytes <= 0 or seconds <= 0:
        return None
    return url, nbytes, seconds, at
