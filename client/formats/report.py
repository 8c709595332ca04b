"""The transfer report: what ``lnet-send --report FILE`` saves, and how ``lnet report`` shows it.

A report is a JSON document, ``"format": "lnet-report/1"``: the file sent, its size and the time it took; the path
attempts (each period the transfer used one path, with the bytes it moved, its rate and why it ended: the seed's
Table 1; with several paths at once, their periods overlap); a throughput timeline (the seed's Figure 1), each
point with every path's own bytes and rate when several ran at once; and the measured edges (its Table 2).
``docs/client.md`` describes every field. ``load`` validates everything and raises ``ReportError`` naming the
problem.

The renderers build a rich ``Table`` (``attempts_table``, ``edges_table``) and a PNG (``plot``, with matplotlib,
an optional extra imported only when a plot is asked for, on the Agg backend without touching pyplot's global
state), with one thinner line per path beside the total where several paths ran at once. The plot draws rates
over a sliding window of seconds computed from the cumulative bytes (``windowed_rates``): the timeline's own
per-tick rates jump between zero and twice the mean as whole blocks
land. Nothing here does network I/O or reads the clock.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.table import Table

from lnet.client.formats.documents import check_object, load_document, write_private_file
from lnet.units import format_size
from lnet.units.numbers import finite_number, kind, show

__all__ = [
    "FORMAT",
    "EdgeRate",
    "PathAttempt",
    "PathPoint",
    "PlotUnavailable",
    "RateWindow",
    "Report",
    "ReportError",
    "TimelinePoint",
    "attempts_table",
    "edges_table",
    "figure",
    "first_reaching",
    "format_path",
    "load",
    "path_series",
    "plot",
    "short_path",
    "windowed_rates",
]

FORMAT = "lnet-report/1"
MAX_REPORT_BYTES = 256 * 1024 * 1024
MAX_SIZE = 2**53
PLOT_INSTALL_HINT = "pip install 'lnet[plot]'"
PLOT_WINDOW_S = 5.0


class ReportError(ValueError):
    """The report is unreadable or invalid; the message names the file (when there is one) and the problem."""


class PlotUnavailable(RuntimeError):
    """matplotlib, an optional extra, is not installed."""


@dataclass(frozen=True)
class PathAttempt:
    """A period ``[start, end)`` (seconds since the transfer began) during which new blocks took ``path``."""

    path: tuple[str, ...]
    start: float
    end: float
    nbytes: int
    mbps: float
    reason: str  # why the attempt ended: "better path", "depot died", "done", ...

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class PathPoint:
    """One path's part of a timeline point: ``nbytes`` had arrived by it, at ``mbps`` since the point before."""

    path: tuple[str, ...]
    nbytes: int
    mbps: float


@dataclass(frozen=True)
class TimelinePoint:
    """At ``t`` seconds, ``nbytes`` had arrived in all, at ``mbps`` lately, on ``path`` (the primary); ``paths``:
    each path's part, when several ran at once (else empty)."""

    t: float
    nbytes: int
    mbps: float
    path: tuple[str, ...]
    paths: tuple[PathPoint, ...] = ()


@dataclass(frozen=True)
class EdgeRate:
    """What the transfer measured of one edge: its throughput over ``samples`` completed hops."""

    source: str
    target: str
    mbps: float
    samples: int


@dataclass(frozen=True)
class Report:
    file: str
    size: int
    seconds: float
    path_attempts: tuple[PathAttempt, ...]
    timeline: tuple[TimelinePoint, ...]
    edges: tuple[EdgeRate, ...]

    @property
    def mbps(self) -> float:
        """The whole transfer's average rate."""
        return self.size * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "file": self.file,
            "size": self.size,
            "seconds": self.seconds,
            "path_attempts": [
                {"path": list(a.path), "start": a.start, "end": a.end, "bytes": a.nbytes, "mbps": a.mbps,
                 "reason": a.reason}
                for a in self.path_attempts
            ],
            "timeline": [_point_dict(p) for p in self.timeline],
            "edges": [{"from": e.source, "to": e.target, "mbps": e.mbps, "samples": e.samples} for e in self.edges],
        }

    @property
    def several_paths(self) -> bool:
        """Whether several paths ran at once at some point (the timeline then has each one's part)."""
        return any(len(point.paths) > 1 for point in self.timeline)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the report atomically; refuses (``ReportError``) one that ``load`` would refuse."""
        text = self.to_json()
        parse(json.loads(text))
        write_private_file(Path(path), text.encode())


def _point_dict(point: TimelinePoint) -> dict[str, Any]:
    entry: dict[str, Any] = {"t": point.t, "bytes": point.nbytes, "mbps": point.mbps, "path": list(point.path)}
    if point.paths:
        entry["paths"] = [{"path": list(p.path), "bytes": p.nbytes, "mbps": p.mbps} for p in point.paths]
    return entry


def load(path: str | os.PathLike[str]) -> Report:
    """Read and validate the report at ``path``; ``ReportError`` names the file and the problem."""
    return load_document(Path(path), MAX_REPORT_BYTES, ReportError, "report", parse)


def parse(document: Any) -> Report:
    """Validate a decoded report document and build the ``Report``."""
    top = _object(document, "the report", ("format", "file", "size", "seconds", "path_attempts", "timeline", "edges"))
    if top["format"] != FORMAT:
        raise ReportError(f"format is {show(top['format'])}, expected {FORMAT!r}")
    attempts: list[PathAttempt] = []
    for i, raw in enumerate(_list(top["path_attempts"], "path_attempts")):
        where = f"path_attempts[{i}]"
        fields = _object(raw, where, ("path", "start", "end", "bytes", "mbps", "reason"))
        start, end = _seconds(fields["start"], f"{where}.start"), _seconds(fields["end"], f"{where}.end")
        if end < start:
            raise ReportError(f"{where} ends at {end} before it starts at {start}")
        reason = fields["reason"]
        if not isinstance(reason, str):
            raise ReportError(f"{where}.reason must be a string")
        attempts.append(
            PathAttempt(
                _path(fields["path"], f"{where}.path", at_least=1), start, end,
                _count(fields["bytes"], f"{where}.bytes"), _rate(fields["mbps"], f"{where}.mbps"), reason,
            )
        )
    timeline: list[TimelinePoint] = []
    for i, raw in enumerate(_list(top["timeline"], "timeline")):
        where = f"timeline[{i}]"
        optional = ("paths",) if isinstance(raw, dict) and "paths" in raw else ()
        fields = _object(raw, where, ("t", "bytes", "mbps", "path", *optional))
        parts: list[PathPoint] = []
        for j, part in enumerate(_list(fields.get("paths", []), f"{where}.paths")):
            inner = f"{where}.paths[{j}]"
            values = _object(part, inner, ("path", "bytes", "mbps"))
            parts.append(PathPoint(
                _path(values["path"], f"{inner}.path", at_least=1), _count(values["bytes"], f"{inner}.bytes"),
                _rate(values["mbps"], f"{inner}.mbps"),
            ))
        point = TimelinePoint(
            _seconds(fields["t"], f"{where}.t"), _count(fields["bytes"], f"{where}.bytes"),
            _rate(fields["mbps"], f"{where}.mbps"), _path(fields["path"], f"{where}.path", at_least=0), tuple(parts),
        )
        if timeline and (point.t < timeline[-1].t or point.nbytes < timeline[-1].nbytes):
            raise ReportError(f"{where} goes back in time or in bytes (the timeline is cumulative)")
        timeline.append(point)
    edges: list[EdgeRate] = []
    for i, raw in enumerate(_list(top["edges"], "edges")):
        where = f"edges[{i}]"
        fields = _object(raw, where, ("from", "to", "mbps", "samples"))
        edges.append(
            EdgeRate(
                _name(fields["from"], f"{where}.from"), _name(fields["to"], f"{where}.to"),
                _rate(fields["mbps"], f"{where}.mbps"), _count(fields["samples"], f"{where}.samples"),
            )
        )
    return Report(
        _name(top["file"], "file"), _count(top["size"], "size"), _seconds(top["seconds"], "seconds"),
        tuple(attempts), tuple(timeline), tuple(edges),
    )


# -- rates over time --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateWindow:
    """The mean rate over ``[start, end]`` (seconds since the transfer began), the window of the sample at ``at``."""

    at: float
    start: float
    end: float
    mbps: float


def windowed_rates(
    timeline: Sequence[TimelinePoint], window_s: float, *, centred: bool = False
) -> list[RateWindow]:
    """For each timeline sample after the start: the mean rate over a window of ``window_s`` seconds, from the
    cumulative bytes.

    Bytes arrive a block at a time, so the timeline's count is a staircase, and a window over it swings by a
    whole block as a step enters or leaves it. Between arrivals the count is therefore drawn as a ramp: the bytes
    that arrived at a sample are spread over the time since the previous arrival (the transfer starts at
    ``t = 0`` with nothing arrived; after the last arrival the count stays flat).

    Trailing (the default) is the window ending at the sample, ``[t - window_s, t]``: what had been achieved by
    then, to judge when a rate was reached. Centred is ``[t - window_s/2, t + window_s/2]``: a change shows where
    it happened, for plots. Windows are cut at the start and the last sample, so the first and last are
    shorter."""
    if not window_s > 0:
        raise ValueError("window_s must be more than 0")
    samples = [point.t for point in timeline if point.t > 0]
    if not samples:
        return []
    times, counts = _arrivals(timeline)
    end = samples[-1]
    if end > times[-1]:
        times.append(end)
        counts.append(counts[-1])

    def arrived(t: float) -> float:
        return _interpolate(times, counts, t)

    windows = []
    for t in samples:
        if centred:
            low, high = max(0.0, t - window_s / 2), min(end, t + window_s / 2)
        else:
            low, high = max(0.0, t - window_s), t
        mbps = (arrived(high) - arrived(low)) * 8 / 1e6 / (high - low)
        windows.append(RateWindow(t, low, high, mbps))
    return windows


def path_series(timeline: Sequence[TimelinePoint]) -> dict[tuple[str, ...], list[TimelinePoint]]:
    """Each path's own timeline (its cumulative bytes at the points that list it), in the order paths first
    appear: what ``windowed_rates`` takes to give one path's rate over time."""
    series: dict[tuple[str, ...], list[TimelinePoint]] = {}
    for point in timeline:
        for part in point.paths:
            series.setdefault(part.path, []).append(TimelinePoint(point.t, part.nbytes, part.mbps, part.path))
    return series


def first_reaching(
    timeline: Sequence[TimelinePoint], mbps: float, window_s: float, *, held: bool = False
) -> float | None:
    """When the rate over the trailing ``window_s`` seconds first reached ``mbps``: the end of that window, in
    seconds since the start; None if it never did.

    ``held``: only a window from whose start the transfer averaged ``mbps`` to its last arrival counts. A burst it
    did not keep up (TCP's first round trips on a lossy link run well above its loss-limited rate until the first
    loss) is then not taken for the rate reached."""
    times, counts = _arrivals(timeline)
    last, total = times[-1], counts[-1]
    for window in windowed_rates(timeline, window_s):
        if window.mbps < mbps:
            continue
        if held:
            rest = last - window.start
            kept = (total - _interpolate(times, counts, window.start)) * 8 / 1e6 / rest if rest > 0 else 0.0
            if kept < mbps:
                continue
        return window.end
    return None


def _arrivals(timeline: Sequence[TimelinePoint]) -> tuple[list[float], list[int]]:
    """The cumulative bytes as (times, counts) from ``(0, 0)``, one point per arrival (the last at the last
    arrival); between them the count is a ramp (``windowed_rates``)."""
    times, counts = [0.0], [0]
    for point in timeline:
        if point.nbytes > counts[-1] and point.t > times[-1]:
            times.append(point.t)
            counts.append(point.nbytes)
        elif point.nbytes > counts[-1]:  # more bytes at the same moment
            counts[-1] = point.nbytes
    return times, counts


# -- rendering ------------------------------------------------------------------------------------------------


def format_path(path: Sequence[str]) -> str:
    """``("ornl", "atl", "sunnyvale")`` -> ``"ornl -> atl -> sunnyvale"``, as the seed's Table 1 writes paths."""
    return " -> ".join(path)


def short_path(path: Sequence[str]) -> str:
    """A path's label on a plot: ``"direct"`` for source to destination, else the depots it goes through
    (``"via atl,ind,kc,den"``)."""
    return "direct" if len(path) <= 2 else "via " + ",".join(path[1:-1])


def attempts_table(report: Report) -> Table:
    """The path attempts, in order, like the seed's Table 1: path, duration, achieved Mbit/s."""
    from rich.table import Table

    table = Table(title=f"Path attempts: {report.file}", title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("Path")
    table.add_column("Duration (s)", justify="right")
    table.add_column("Mbit/s", justify="right")
    table.add_column("Data", justify="right")
    table.add_column("Ended", style="dim")
    for number, attempt in enumerate(report.path_attempts, 1):
        table.add_row(
            str(number), format_path(attempt.path), f"{attempt.seconds:.2f}", f"{attempt.mbps:.2f}",
            format_size(attempt.nbytes), attempt.reason,
        )
    return table


def edges_table(report: Report) -> Table:
    """The edges the transfer measured, fastest first, like the seed's Table 2."""
    from rich.table import Table

    table = Table(title="Edge throughputs", title_justify="left")
    table.add_column("Edge")
    table.add_column("Mbit/s", justify="right")
    table.add_column("Samples", justify="right")
    for edge in sorted(report.edges, key=lambda e: -e.mbps):
        table.add_row(format_path((edge.source, edge.target)), f"{edge.mbps:.2f}", str(edge.samples))
    return table


def plot(
    reports: Report | Sequence[Report],
    out_png: str | os.PathLike[str],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    window_s: float = PLOT_WINDOW_S,
) -> None:
    """Draw ``figure(...)`` into the PNG file ``out_png``. Raises ``PlotUnavailable`` without matplotlib,
    ``OSError`` when ``out_png`` cannot be written."""
    drawn = figure(reports, labels=labels, title=title, window_s=window_s)
    drawn.savefig(os.fspath(out_png), format="png")


def figure(
    reports: Report | Sequence[Report],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    window_s: float = PLOT_WINDOW_S,
) -> Figure:
    """Throughput over time, one line per report (e.g. direct, cold start, warm start), like the seed's Figure 1:
    a matplotlib ``Figure`` of 1000 x 540 pixels, not attached to pyplot.

    Each line is the mean rate over a sliding window of ``window_s`` seconds centred on each timeline sample
    (``windowed_rates``). Every path change is a marker on its report's line labelled with the new path (and a
    tick in the same colour under the axis); the legend gives each report's mean rate and the path it started on.
    Raises ``PlotUnavailable`` without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        raise PlotUnavailable(f"plotting needs matplotlib: {PLOT_INSTALL_HINT}") from None
    many = [reports] if isinstance(reports, Report) else list(reports)
    if not many:
        raise ValueError("nothing to plot")
    names = list(labels) if labels is not None else [r.file for r in many]
    if len(names) != len(many):
        raise ValueError(f"{len(many)} reports but {len(names)} labels")
    drawn = Figure(figsize=(10, 5.4), dpi=100)
    FigureCanvasAgg(drawn)
    axes = drawn.add_subplot()
    top = 0.0
    for number, (report, name) in enumerate(zip(many, names, strict=True)):
        colour = f"C{number % 10}"  # the marker plots below would advance the automatic colour cycle
        rates = windowed_rates(report.timeline, window_s, centred=True)
        times, values = [0.0, *(r.at for r in rates)], [0.0, *(r.mbps for r in rates)]
        top = max(top, *values)
        started = f", starts {short_path(report.path_attempts[0].path)}" if report.path_attempts else ""
        axes.plot(times, values, color=colour, linewidth=1.6, label=f"{name}: {report.mbps:.2f} Mbit/s mean{started}")
        if report.several_paths:  # each path's own rate, thinner, in the report's colour, one dash pattern each
            for k, (path, series) in enumerate(path_series(report.timeline).items()):
                own = windowed_rates(series, window_s, centred=True)
                if not own:
                    continue
                carried = series[-1].nbytes
                axes.plot(
                    [r.at for r in own], [r.mbps for r in own], color=colour, linewidth=1.0, alpha=0.8,
                    linestyle=_DASHES[k % len(_DASHES)],
                    label=f"{name}, {short_path(path)}: {carried / report.size if report.size else 0:.0%} of the bytes",
                )
        for switch, attempt in enumerate(report.path_attempts[1:]):
            y = _interpolate(times, values, attempt.start)
            axes.plot([attempt.start], [y], marker="o", markersize=6, markerfacecolor="white",
                      markeredgecolor=colour, markeredgewidth=1.5, linestyle="none", zorder=3)
            axes.plot([attempt.start], [0], marker="|", markersize=10, color=colour, linestyle="none",
                      clip_on=False, zorder=3)
            axes.annotate(
                short_path(attempt.path), xy=(attempt.start, y), xytext=(4, 7 + 10 * (switch % 3)),
                textcoords="offset points", fontsize=8, color=colour, ha="left", va="bottom",
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.75},
            )
    axes.set_xlabel("Elapsed time (s)")
    axes.set_ylabel(f"Throughput (Mbit/s, mean over a sliding {window_s:g} s window)")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0, top=max(top * 1.3, 1.0))  # headroom for the path labels and the legend
    axes.grid(True, alpha=0.3)
    handles, _ = axes.get_legend_handles_labels()
    if any(len(report.path_attempts) > 1 for report in many):
        handles.append(Line2D([], [], marker="o", markersize=6, markerfacecolor="white", markeredgecolor="grey",
                              markeredgewidth=1.5, linestyle="none", label="path change (labelled: the new path)"))
    axes.legend(handles=handles, loc="upper right", fontsize=8.5, framealpha=0.9)
    axes.set_title(title or _default_title(many))
    drawn.tight_layout()
    return drawn


_DASHES: tuple[Any, ...] = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
"""Line styles for the paths of one report: the colour says which report, the dashes which path."""


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """``ys`` at ``x`` on the piecewise-linear curve through (xs, ys) (xs ascending), flat beyond its ends."""
    i = bisect.bisect_right(xs, x)
    if i == 0:
        return ys[0]
    if i == len(xs):
        return ys[-1]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _default_title(reports: list[Report]) -> str:
    first = reports[0]
    ends = next((a.path for a in first.path_attempts if len(a.path) >= 2), ())
    where = f" from {ends[0]} to {ends[-1]}" if ends else ""
    plural = "s" if len(reports) > 1 else ""
    return f"{format_size(first.size)} transfer{plural} of {first.file}{where}"


# -- validation -----------------------------------------------------------------------------------------------


def _object(value: Any, where: str, fields: tuple[str, ...]) -> dict[str, Any]:
    return check_object(value, where, fields, ReportError)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ReportError(f"{where} must be a list, not {kind(value)}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 2048:
        raise ReportError(f"{where} must be a non-empty string of at most 2048 characters")
    return value


def _path(value: Any, where: str, *, at_least: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not at_least <= len(value) <= 256:
        raise ReportError(f"{where} must be a list of {at_least} to 256 vertex names")
    return tuple(_name(vertex, f"{where}[{i}]") for i, vertex in enumerate(value))


def _count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReportError(f"{where} must be a whole number, not {kind(value)}")
    if not 0 <= value <= MAX_SIZE:
        raise ReportError(f"{where} is {show(value)}, outside [0, {MAX_SIZE}]")
    return value


def _number(value: Any, where: str) -> float:
    return finite_number(value, where, low=0, high=1e15, meaning="a finite number >= 0", error=ReportError)


_seconds = _number
_rate = _number



