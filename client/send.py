"""``lnet-send FILE --to DEPOT``: move a file to a far depot through a chain of depots, and write its manifest.

The I/O shell around ``Relay`` (the pipeline) and ``PathScheduler`` (the choice of chain): reads the depots file
and the edge memory, checks that the depots answer and fits the transfer to their limits (``fit_to_limits``,
pure: what each depot's ``/v1/status`` says it allows), runs the transfer with a live progress bar, then writes
the manifest (0600: it holds read capabilities), the optional report, and the edge memory for the next warm
start. Meanwhile the send journal beside the manifest (``lnet.client.resume``) records every block delivered, so
that the same command, run again after an interruption, sends only what the destination lacks.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from lnet.depot.clock import TrioWallClock
from lnet.depot.protocol import innermost
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.units import format_size, parse_duration, parse_size

from . import mirrors, report
from .depot_client import DepotClient
from .exits import EXIT_CODES_HELP, ExitCode
from .manifest import BlockEntry, BlockSource, Manifest
from .overlay import Overlay, OverlayError
from .relay import (
    BlockDelivered,
    BlockRecord,
    DepotRefused,
    IntegrityError,
    Note,
    PathChanged,
    PathShares,
    Relay,
    RelayConfig,
    RelayEvent,
    RelayResult,
    Stream,
)
from .relay import TransferFailed as RelayFailed
from .resume import (
    ResumeRefused,
    SendJournal,
    file_header,
    is_interrupt,
    journal_path,
    resume_command,
    source_header,
)

__all__ = ["DEFAULT_DURATION_S", "DEFAULT_MAX_PATHS", "DepotLimits", "fit_to_limits", "main", "send"]

DEFAULT_DURATION_S = 24 * 3600.0
"""How long the destination keeps the blocks when ``--duration`` is not given, if it allows that long."""
DEFAULT_MAX_PATHS = 1
"""``--max-paths`` when not given: one path, as before issue 12, until the testbed benchmark (bench/) says which
default serves best."""

_EPILOG = f"""\
The depots file (TOML) names the depots and which vertex this client is:
  here = "ornl"
  [depots.atl]
  url = "http://198.51.100.7:6714"
  token = "..."            # optional operator token for allocating there
It is read from --depots, else $LNET_DEPOTS, else depots.toml in your config directory.

Every depot's limits (max_allocation, max_duration in its /v1/status) are read before the first block. Without
--duration the destination keeps the file as long as it allows, at most 1d; depots on the way hold a block at
most 1h or their max_duration. A --duration over the destination's limit, or a --block-size over a depot's on
a pinned path, fails at once (exit 2); an adaptive transfer leaves such depots out. A depot's refusal that a
retry cannot change (a 4xx such as a wrong token) stops the transfer at once instead of retrying it.

examples:
  lnet-send data.h5 --to sunnyvale                        # the scheduler picks and re-picks the chain
  lnet-send data.h5 --to sunnyvale --path atl,ind,kc,den  # pinned: this chain, no adaptation
  lnet-send data.h5 --to sunnyvale --cold --report run.json && lnet report run.json --plot run.png
  lnet-send data.h5 --to sunnyvale --max-paths 3          # up to 3 disjoint chains at once, blocks shared by rate
  lnet-get data.h5.manifest.json -o data.h5               # at the far end: fetch and verify
  lnet-send photos/ --to sunnyvale --priority '*.json'    # a tree: small files packed, priority files first
  lnet-get photos.manifest.json -o photos                 # rebuilds the tree

An interrupted lnet-send (Ctrl-C, a lost session, a crash) resumes when the same command is run again: the blocks
the destination still holds, recorded in MANIFEST.journal, are checked there and not sent again. A source that
changed since is refused; --restart sends it from the start.

{EXIT_CODES_HELP}
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lnet-send",
        description="Send FILE to the depot DEST through a chain of depots, pipelined block by block.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", type=Path, metavar="FILE", nargs="?",
                   help="the file or directory tree to send (or --source URL ...)")
    p.add_argument(
        "--source", action="append", metavar="URL", default=[],
        help="instead of FILE: a replica of the file on an HTTP server (repeat for each); the replicas feed the "
        "first hop, ranges from all at once (lnet-get's multi-source download), and the relay starts as they land",
    )
    p.add_argument("--spool", type=Path, metavar="DIR", help="with --source: where the arriving file is kept "
                   "while it is sent (default: the temporary directory); removed at the end")
    p.add_argument("--to", required=True, metavar="DEPOT", help="the destination depot's name in the depots file")
    p.add_argument("--depots", type=Path, metavar="FILE", help="the depots file (TOML)")
    p.add_argument("--path", metavar="A,B,...", help="pin the chain of depots (no adaptation); DEST may be omitted")
    p.add_argument(
        "--max-paths", type=int, metavar="N",
        help=f"use up to N chains at once ({DEFAULT_MAX_PATHS}): the scheduler adds a chain that shares no overlay "
        "link with the others when it predicts a gain, and drops one that stops adding; each block goes down the "
        "chain that would deliver it soonest, so all finish together. Gains only where the chains do not share a "
        "physical bottleneck. 1: one chain, re-chosen as it goes. Not with --path (one pinned chain)",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument("--cold", action="store_true", help="ignore what earlier transfers learnt about the edges")
    start.add_argument("--warm", action="store_true", help="start from the edge memory (the default)")
    p.add_argument("--memory", type=Path, metavar="FILE", help="the edge memory (default: the user cache dir)")
    p.add_argument("--block-size", default="4MiB", metavar="SIZE",
                   help="bytes per block (4MiB); at most the max_allocation of every depot on the path")
    p.add_argument("--duration", metavar="TIME",
                   help="how long the destination keeps the file (default: the longest the destination allows, "
                   "at most 1d; a longer --duration than it allows fails at once)")
    p.add_argument("--max-inflight", type=int, default=16, metavar="N", help="most blocks on one hop at once (16)")
    p.add_argument("--timeout", default="30s", metavar="TIME", help="bound on every network wait (30s)")
    p.add_argument("--manifest", type=Path, metavar="FILE", help="where to write the manifest (FILE.manifest.json)")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the transfer report (path attempts, timeline)")
    p.add_argument("--restart", action="store_true", help="do not resume an interrupted run of this transfer: "
                   "free the blocks it sent and send everything again")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end instead of a summary")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    mirrors.add_arguments(p, "replicas (with --source)")
    # -- directory trees (lnet.client.tree_transfer; docs/client.md, "Trees and small files") --
    p.add_argument("--priority", action="append", metavar="GLOB",
                   help="a tree's files matching GLOB (path or name) go first; repeatable")
    p.add_argument("--pipeline-depth", type=int, metavar="N",
                   help="a tree: fixed pipelining depth N (N blocks in flight per hop, batches of N+1 files) "
                   "instead of the planner's, as the seed's DEFAULT baseline")
    p.add_argument("--bdp", metavar="SIZE", help="a tree: the first hop's bandwidth-delay product (default: measured)")
    return p


class SendError(Exception):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- the depots' limits ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DepotLimits:
    """What a depot lends at most, from its ``/v1/status``; None where it does not say (then nothing is checked)."""

    max_allocation: int | None = None
    max_duration: float | None = None

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> DepotLimits:
        def number(key: str) -> float | None:
            value = status.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                return None
            return float(value)

        allocation = number("max_allocation")
        return cls(int(allocation) if allocation is not None else None, number("max_duration"))


def _seconds(value: float) -> str:
    """``3600.0`` -> ``"1h"``: a duration as ``--duration`` takes it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def _too_large(block_size: int, depot: str, limit: int) -> SendError:
    return SendError(ExitCode.USAGE, f"--block-size {format_size(block_size)} is over depot {depot}'s "
                     f"max_allocation of {format_size(limit)} ({limit} bytes): give --block-size {limit} or less")


def fit_to_limits(
    config: RelayConfig,
    limits: Mapping[str, DepotLimits],
    dest: str,
    pinned: Sequence[str] | None,
    *,
    longest_duration: bool,
) -> tuple[RelayConfig, dict[str, str]]:
    """The transfer fitted to what its depots allow, before any block moves; and, for an adaptive transfer, the
    depots left out of the candidates (name -> why). Raises ``SendError`` (usage) when it cannot fit.

    ``longest_duration``: ``config.duration_s`` is the most wanted (``--duration`` not given) and is shortened to
    the destination's max_duration; otherwise it is asked for as it is, and over that limit it fails. Blocks
    pass intermediate depots held for ``config.hold_s``, cut to each one's max_duration. Every depot a block may
    cross must take ``config.block_size`` in one allocation: on a pinned path that is every depot on it; an
    adaptive transfer leaves out the depots that cannot (the destination must)."""
    target = limits.get(dest, DepotLimits())
    duration = config.duration_s
    if target.max_duration is not None and duration > target.max_duration:
        if not longest_duration:
            raise SendError(
                ExitCode.USAGE, f"--duration {_seconds(duration)} is over depot {dest}'s max_duration of "
                f"{_seconds(target.max_duration)}: give --duration {_seconds(target.max_duration)} or less, "
                f"or leave --duration out to take the longest {dest} allows",
            )
        duration = target.max_duration
    block = config.block_size
    excluded: dict[str, str] = {}
    on_path = pinned[1:] if pinned is not None else [dest]
    for name in on_path:
        largest = limits.get(name, DepotLimits()).max_allocation
        if largest is not None and largest < block:
            raise _too_large(block, name, largest)
    if pinned is None:
        for name, limit in limits.items():
            if name != dest and limit.max_allocation is not None and limit.max_allocation < block:
                excluded[name] = (f"left out: its max_allocation of {format_size(limit.max_allocation)} is under "
                                  f"--block-size {format_size(block)}")
    holds = {  # the destination's too: probes' blocks are held there
        name: limit.max_duration
        for name, limit in limits.items()
        if limit.max_duration is not None and limit.max_duration < config.hold_s
    }
    return replace(config, duration_s=duration, hold_s_at={**config.hold_s_at, **holds}), excluded


async def send(
    file: Path | Stream,
    overlay: Overlay,
    dest: str,
    *,
    pinned: Sequence[str] | None,
    memory: EdgeMemory,
    warm: bool,
    relay_config: RelayConfig,
    scheduler_config: SchedulerConfig | None = None,
    timeout_s: float = 30.0,
    on_event: Any = None,
    available: Callable[[int, int], Awaitable[None]] | None = None,
    longest_duration: bool = False,
    journal: SendJournal | None = None,
) -> tuple[RelayResult, PathScheduler | None, list[str]]:
    """Run one transfer; returns the relay's result, the scheduler (None when pinned) and the depots skipped.

    The depots' limits are read from their status first and the transfer fitted to them (``fit_to_limits``; its
    ``longest_duration``): a transfer that cannot fit fails with ``SendError`` before any block moves. With a
    ``journal`` (begun), the blocks an interrupted run left at the destination are checked and not sent again
    (reported as delivered at the start), and every block delivered now is recorded in it."""
    clock = TrioWallClock()
    clients = {
        name: DepotClient(entry.url, token=entry.token, timeout=timeout_s) for name, entry in overlay.depots.items()
    }
    try:
        alive: dict[str, bool] = {}
        statuses: dict[str, dict[str, Any]] = {}
        rtt_s: dict[str, float] = {}

        async def check(name: str) -> None:
            try:
                statuses[name] = await clients[name].status()
                alive[name] = True
            except Exception:  # noqa: BLE001 - any failure here means: do not use this depot
                alive[name] = False
                return
            # The round trip on the now open connection: it orders the scheduler's exploration.
            began = trio.current_time()
            if await clients[name].healthy():
                rtt_s[name] = trio.current_time() - began

        async with trio.open_nursery() as nursery:
            for name in clients:
                nursery.start_soon(check, name)
        if not alive[dest]:
            url = overlay.depots[dest].url
            raise SendError(ExitCode.UNREACHABLE, f"the destination {dest} ({url}) does not answer")
        skipped = sorted(name for name, ok in alive.items() if not ok)
        if pinned is not None:
            down = [name for name in pinned[1:] if not alive[name]]
            if down:
                raise SendError(ExitCode.UNREACHABLE, f"depot(s) on the pinned path do not answer: {', '.join(down)}")
        relay_config, excluded = fit_to_limits(
            relay_config, {name: DepotLimits.from_status(status) for name, status in statuses.items()}, dest,
            pinned, longest_duration=longest_duration,
        )
        for name, why in sorted(excluded.items()):
            if on_event is not None:
                on_event(Note(f"depot {name} {why}", clock()))
        if warm:
            now = clock()
            url_to_vertex = overlay.url_to_vertex()
            for name, status in statuses.items():
                links = status.get("links")
                if isinstance(links, list):
                    memory.seed_from_links(name, links, url_to_vertex, now)
        scheduler = None
        if pinned is None:
            vertices = [overlay.here, *(name for name in clients if alive[name] and name not in excluded)]
            # Weights are per stream, times the blocks the relay keeps in flight on a hop.
            config = replace(scheduler_config or SchedulerConfig(), streams=relay_config.max_inflight)
            scheduler = PathScheduler(vertices, overlay.here, dest, memory, config, rtt_s=rtt_s)
        delivered: dict[int, BlockRecord] = {}
        if journal is not None:
            delivered = await journal.prepare(clients[dest], file, available)
            for index, record in sorted(delivered.items()):
                if on_event is not None:
                    on_event(BlockDelivered(index, record.length, clock(), record))
            on_event = journal.recording(on_event)
        relay = Relay(
            file,
            overlay.here,
            dest,
            {name: client for name, client in clients.items() if alive[name] and name not in excluded},
            scheduler=scheduler,
            pinned=pinned,
            memory=memory,
            config=relay_config,
            on_event=on_event,
            clock=clock,
            available=available,
            delivered=delivered,
        )
        if journal is None:
            return await relay.run(), scheduler, skipped
        async with trio.open_nursery() as nursery:
            nursery.start_soon(journal.keep_synced)
            result = await relay.run()
            nursery.cancel_scope.cancel()
        return result, scheduler, skipped
    finally:
        with trio.CancelScope(shield=True):
            for client in clients.values():
                await client.aclose()


async def send_from_replicas(
    urls: Sequence[str], spool: Path, *, mirror_options: dict[str, Any], on_size: Callable[[int], None],
    **options: Any,
) -> tuple[RelayResult, PathScheduler | None, list[str], mirrors.MirrorResult]:
    """``send`` of a file that is still arriving from its replicas into ``spool``: each block leaves as soon as
    its bytes are in (the relay waits on the download's ``Watcher``)."""
    watcher = mirrors.Watcher()
    downloaded: list[mirrors.MirrorResult] = []

    async def download() -> None:
        downloaded.append(await mirrors.fetch_mirrors(urls, spool, watcher=watcher, **mirror_options))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(download)
        await watcher.started.wait()
        on_size(watcher.size)
        try:
            result, scheduler, skipped = await send(watcher.path, available=watcher.wait_for, **options)
        finally:
            watcher.release()
    return result, scheduler, skipped, downloaded[0]


def interrupted(journal: SendJournal, dest: str, argv: list[str], what: str = "interrupted") -> str:
    """What an interrupted run says: what is kept, and the exact command that resumes."""
    if not journal.records:
        return f"{what} before any block reached {dest}; to send it, run the same command again: {resume_command(argv)}"
    return (f"{what}: {len(journal.records)} blocks delivered to {dest} are recorded in {journal.path}; to resume, "
            f"run the same command again: {resume_command(argv)}")


def failure_exit(exc: BaseException, subject: Path | None) -> tuple[ExitCode, str] | None:
    """The exit code and message for a failed transfer (a nursery's failure comes wrapped); None: not ours.
    ``subject`` is what was being sent, named in the message of a local I/O error."""
    inner = innermost(exc)
    if isinstance(inner, SendError):
        return inner.code, str(inner)
    if isinstance(inner, ResumeRefused):
        return ExitCode.USAGE, str(inner)
    if isinstance(inner, mirrors.MirrorError):
        return inner.exit_code, f"the replicas: {inner}"
    if isinstance(inner, IntegrityError):
        return ExitCode.INTEGRITY, str(inner)
    if isinstance(inner, DepotRefused):  # asking again would not help: a limit or a token, else something odd
        usage = inner.error.status in (400, 401, 403, 413)
        return (ExitCode.USAGE if usage else ExitCode.FAILED), str(inner)
    if isinstance(inner, RelayFailed):
        return ExitCode.UNREACHABLE, str(inner)
    if isinstance(inner, OSError):
        return ExitCode.FAILED, f"{subject}: {inner}"
    return None


def source_name(urls: Sequence[str]) -> str:
    """The file's name for the manifest: the last segment of the first URL's path."""
    name = urlsplit(urls[0]).path.rstrip("/").rsplit("/", 1)[-1]
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return name[:200] or "download"


def build_manifest(
    file: Path, dest_url: str, result: RelayResult, config: RelayConfig, path: Sequence[str]
) -> Manifest:
    blocks = tuple(
        BlockEntry(
            index=record.index,
            offset=record.offset,
            length=record.length,
            hash=record.hash,
            sources=(BlockSource(dest_url, record.allocation.read, record.allocation.expires),),
        )
        for record in result.blocks
    )
    return Manifest(
        name=file.name,
        size=sum(block.length for block in blocks),
        block_size=config.block_size,
        hash_algorithm=config.hash_algorithm,
        file_hash=result.file_hash,
        created=time.time(),
        path=tuple(path),
        blocks=blocks,
    )


def final_path(result: RelayResult) -> list[str]:
    """The path the transfer ended on (the primary, with several): the manifest's ``path``."""
    if result.final_paths:
        return list(result.final_paths[0])
    return list(result.paths[-1].path) if result.paths else []


def ran_several(result: RelayResult) -> bool:
    """Whether the transfer ran more than one path at once at some time (then per-path figures say something the
    totals do not)."""
    runs = sorted(result.paths, key=lambda run: run.start)
    return any(
        later.start < (earlier.end if earlier.end is not None else math.inf)
        for i, earlier in enumerate(runs) for later in runs[i + 1 :]
    )


def shares_text(shares: PathShares | Sequence[tuple[Sequence[str], int]], total: int) -> str:
    """Each path's share of the bytes delivered, for people: ``via atl 61% · direct 39%``."""
    pairs: list[tuple[Sequence[str], int]] = (
        [(s.path, s.bytes) for s in shares.paths] if isinstance(shares, PathShares) else list(shares)
    )
    return " · ".join(f"{report.short_path(path)} {nbytes / total if total else 0.0:.0%}" for path, nbytes in pairs)


def summary(result: RelayResult, scheduler: PathScheduler | None, size: int) -> dict[str, Any]:
    attempts: list[dict[str, Any]]
    if scheduler is not None:
        started = scheduler.attempts[0].start if scheduler.attempts else 0.0
        attempts = [
            {
                "path": list(a.path),
                "start": a.start - started,
                "end": (a.end if a.end is not None else started + result.seconds) - started,
                "mbps": a.throughput_bps * 8 / 1e6,
                "reason": a.reason,
            }
            for a in scheduler.attempts
        ]
    else:
        attempts = []
    relay_paths = []
    for run in result.paths:
        end = run.end if run.end is not None else result.seconds
        mbps = run.nbytes * 8 / 1e6 / (end - run.start) if end > run.start else 0.0
        relay_paths.append(
            {"path": list(run.path), "start": run.start, "end": end, "bytes": run.nbytes, "mbps": mbps,
             "reason": run.reason}
        )
    several = ran_several(result)
    timeline = []
    for point in result.timeline:
        entry: dict[str, Any] = {"t": point.t, "bytes": point.bytes, "mbps": point.rate_bps * 8 / 1e6,
                                 "path": list(point.path)}
        if several:  # each path's bytes so far and its rate since the point before
            entry["paths"] = [{"path": list(s.path), "bytes": s.bytes, "mbps": s.rate_bps * 8 / 1e6}
                              for s in point.paths]
        timeline.append(entry)
    delivered = sum(result.path_bytes.values())
    return {
        "bytes": size,
        "seconds": result.seconds,
        "mbps": size * 8 / 1e6 / result.seconds if result.seconds > 0 else 0.0,
        "blocks": len(result.blocks),
        "resends": result.resends,
        "paths": [list(path) for path in result.final_paths],
        "path_shares": [
            {"path": list(path), "bytes": nbytes, "share": nbytes / delivered if delivered else 0.0,
             "mbps": nbytes * 8 / 1e6 / result.seconds if result.seconds > 0 else 0.0}
            for path, nbytes in result.path_bytes.items()
        ],
        "path_attempts": relay_paths,
        "scheduler_attempts": attempts,
        "edges": [
            {"from": u, "to": v, "mbps": rate * 8 / 1e6, "bytes": nbytes, "samples": samples}
            for (u, v), (rate, nbytes, samples) in sorted(result.edges.items())
        ],
        "timeline": timeline,
    }


def over_text(result: RelayResult) -> str:
    """What the closing line says the file went over: the path, or every path used with its share."""
    if not ran_several(result):
        return " -> ".join(final_path(result))
    delivered = sum(result.path_bytes.values())
    used = [(path, nbytes) for path, nbytes in result.path_bytes.items() if nbytes]
    return f"{len(used)} paths ({shares_text(used, delivered)})"


def scheduler_config(args: argparse.Namespace) -> SchedulerConfig:
    """The scheduler's settings from the command line (``--max-paths``, already checked by ``main``)."""
    return SchedulerConfig(max_paths=args.max_paths)


def save_report(path: Path, name: str, size: int, summary: dict[str, Any]) -> None:
    """The report ``lnet report`` reads (docs/client.md): path attempts, the timeline, per-edge throughputs."""
    document = {
        "format": report.FORMAT,
        "file": name,
        "size": size,
        "seconds": summary["seconds"],
        "path_attempts": [
            {key: entry[key] for key in ("path", "start", "end", "bytes", "mbps", "reason")}
            for entry in summary["path_attempts"]
        ],
        "timeline": summary["timeline"],
        "edges": [{key: edge[key] for key in ("from", "to", "mbps", "samples")} for edge in summary["edges"]],
    }
    report.parse(document).save(path)  # one set of rules for what lnet report can read


class _Progress:
    """The live progress bar, and one line per path change."""

    def __init__(self, console: Console, total: int, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.fields[path]}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("send", total=total, path="")

    def __call__(self, event: RelayEvent) -> None:
        if isinstance(event, BlockDelivered):
            self.progress.advance(self.task, event.nbytes)
        elif isinstance(event, PathShares):
            self.progress.update(self.task, path=shares_text(event, event.delivered))
        elif isinstance(event, PathChanged):
            self.progress.update(self.task, path=" -> ".join(event.path) if len(event.paths) <= 1 else "")
            if self.enabled:
                self.console.print(path_change_text(event))
        elif isinstance(event, Note) and self.enabled:
            self.console.print(f"[yellow]{event.text}[/yellow]")


def path_change_text(event: PathChanged) -> str:
    """``path (better): a -> b -> c``; with several paths, all of them, the primary first."""
    if len(event.paths) <= 1:
        return f"path ({event.reason}): {' -> '.join(event.path)}"
    return f"{len(event.paths)} paths ({event.reason}): " + " | ".join(" -> ".join(p) for p in event.paths)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    console = Console(stderr=True, highlight=False, soft_wrap=True)

    def fail(code: ExitCode, message: str) -> int:
        console.print(f"lnet-send: {message}")
        return int(code)

    try:
        overlay = Overlay.load(args.depots)
        block_size = parse_size(args.block_size)
        duration = parse_duration(args.duration) if args.duration is not None else DEFAULT_DURATION_S
        timeout = parse_duration(args.timeout)
        relay_config = RelayConfig(
            block_size=block_size,
            duration_s=duration,
            timeout_s=timeout,
            max_inflight=args.max_inflight,
            initial_inflight=min(4, args.max_inflight),
            min_inflight=min(2, args.max_inflight),
        )
    except (OverlayError, ValueError) as exc:
        return fail(ExitCode.USAGE, str(exc))
    if args.max_paths is not None and args.max_paths < 1:
        return fail(ExitCode.USAGE, "--max-paths must be at least 1")
    if args.max_paths is not None and args.max_paths > 1 and args.path is not None:
        return fail(ExitCode.USAGE, "--max-paths: a pinned --path is one chain; leave out --path to use several")
    args.max_paths = args.max_paths if args.max_paths is not None else DEFAULT_MAX_PATHS
    if args.to not in overlay.depots:
        return fail(ExitCode.USAGE, f"--to {args.to}: no such depot in {overlay.source} "
                    f"(known: {', '.join(overlay.depots)})")
    if (args.file is None) == (not args.source):
        return fail(ExitCode.USAGE, "give the FILE to send, or its replicas with --source URL (not both)")
    if args.file is not None and not args.file.is_file() and not args.file.is_dir():
        return fail(ExitCode.USAGE, f"{args.file}: not a readable file or directory")
    bad = [url for url in args.source if not mirrors.is_url(url)]
    if bad:
        return fail(ExitCode.USAGE, f"--source {bad[0]}: not an http(s) URL")
    if len(set(args.source)) != len(args.source):
        return fail(ExitCode.USAGE, "--source: a URL is given twice")
    try:
        plan = mirrors.plan_config(args, timeout)
    except ValueError as exc:
        return fail(ExitCode.USAGE, str(exc))
    pinned: list[str] | None = None
    if args.path is not None:
        names = [name.strip() for name in args.path.split(",") if name.strip()]
        unknown = [name for name in names if name not in overlay.depots]
        if unknown:
            return fail(ExitCode.USAGE, f"--path: unknown depot(s) {', '.join(unknown)}")
        if not names or names[-1] != args.to:
            names.append(args.to)
        if len(set(names)) != len(names):
            return fail(ExitCode.USAGE, "--path: a depot may appear only once")
        pinned = [overlay.here, *names]
    memory_path = args.memory or EdgeMemory.default_path()
    memory = EdgeMemory() if args.cold else EdgeMemory.load(memory_path)
    if args.file is not None and args.file.is_dir():  # a tree: planned, packed and sent by lnet.client.tree_transfer
        from .tree_transfer import send_directory  # here: that module builds on this one

        return send_directory(args, overlay, relay_config, pinned, memory, memory_path, console, argv)
    name = args.file.name if args.file is not None else source_name(args.source)
    manifest_path = args.manifest or Path(f"{name}.manifest.json")
    try:  # resumes an interrupted run of this transfer (lnet.client.resume)
        journal = SendJournal.open(journal_path(manifest_path), restart=args.restart)
    except ResumeRefused as exc:
        return fail(ExitCode.USAGE, str(exc))
    try:
        return _send_file(args, argv, console, name, manifest_path, journal, overlay, relay_config, pinned, memory,
                          memory_path, plan, timeout)
    finally:
        if not journal.records:
            journal.remove()  # no block is at the destination: nothing to resume
        journal.close()


def _send_file(
    args: argparse.Namespace, argv: list[str], console: Console, name: str, manifest_path: Path,
    journal: SendJournal, overlay: Overlay, relay_config: RelayConfig, pinned: list[str] | None,
    memory: EdgeMemory, memory_path: Path, plan: Any, timeout: float,
) -> int:
    """``main`` for one file, or one file from its replicas (``--source``), with its journal open."""

    def fail(code: ExitCode, message: str) -> int:
        console.print(f"lnet-send: {message}")
        return int(code)

    dest_url = overlay.depots[args.to].url
    if args.file is not None:
        try:
            journal.begin(file_header(args.file, dest_url, relay_config))
        except ResumeRefused as exc:
            return fail(ExitCode.USAGE, str(exc))
    size = args.file.stat().st_size if args.file is not None else 0
    show = not args.no_progress and not args.json and console.is_terminal
    progress = _Progress(console, size, enabled=not args.json)
    options = {"overlay": overlay, "dest": args.to, "pinned": pinned, "memory": memory, "warm": not args.cold,
               "relay_config": relay_config, "scheduler_config": scheduler_config(args), "timeout_s": timeout,
               "on_event": progress, "longest_duration": args.duration is None, "journal": journal}
    fed: mirrors.MirrorResult | None = None
    # --source: the spool outlives an interrupted run (the download resumes from it); named after the journal
    spool = Path(args.spool or tempfile.gettempdir()) / (
        "lnet-send-" + hashlib.sha256(str(journal.path.resolve()).encode()).hexdigest()[:16])

    def sized(total: int) -> None:
        nonlocal size
        size = total
        progress.progress.update(progress.task, total=total)
        journal.begin(source_header(args.source, name, total, dest_url, relay_config))

    async def from_replicas(spool: Path) -> tuple[RelayResult, PathScheduler | None, list[str]]:
        nonlocal fed
        mirror_options = {"config": plan, "timeout_s": timeout, "sha256": args.sha256,
                          "check_validators": not args.ignore_validators,
                          "history": args.history if args.history is not None else mirrors.history_path()}
        result, scheduler, skipped, fed = await send_from_replicas(
            args.source, spool / name, mirror_options=mirror_options, on_size=sized, **options)
        return result, scheduler, skipped

    try:
        with progress.progress if show else contextlib.nullcontext():
            if args.file is not None:
                result, scheduler, skipped = trio.run(lambda: send(args.file, **options))
            else:
                if args.restart:
                    shutil.rmtree(spool, ignore_errors=True)
                spool.mkdir(mode=0o700, parents=True, exist_ok=True)
                result, scheduler, skipped = trio.run(from_replicas, spool)
    except BaseException as exc:  # Ctrl-C comes out of trio.run bare, or in a group from a nursery
        if is_interrupt(exc):
            return fail(ExitCode.INTERRUPTED, interrupted(journal, args.to, argv))
        if not isinstance(exc, Exception):
            raise
        mapped = failure_exit(exc, args.file)
        if mapped is None:
            raise
        code = fail(*mapped)
        if journal.records and mapped[0] != ExitCode.USAGE:
            console.print(f"lnet-send: {interrupted(journal, args.to, argv, what='stopped')}")
        return code
    final = final_path(result)
    manifest = build_manifest(Path(name), dest_url, result, relay_config, final)
    manifest.save(manifest_path)
    journal.remove()
    if args.source:
        shutil.rmtree(spool, ignore_errors=True)
    try:
        memory.save(memory_path)
    except OSError as exc:
        console.print(f"lnet-send: could not save the edge memory to {memory_path}: {exc}")
    report = summary(result, scheduler, size)
    if args.report is not None:
        save_report(args.report, name, size, report)
    sources = fed.to_dict()["replicas"] if fed is not None else None
    if args.json:
        print(json.dumps({**report, "file": str(args.file or name), "manifest": str(manifest_path),
                          "file_hash": result.file_hash, "path": final, "skipped_depots": skipped,
                          "resumed_blocks": len(journal.resumed),
                          **({"sources": sources} if sources is not None else {})}))
    else:
        console.print(
            f"sent {format_size(size)} in {result.seconds:.1f} s ({report['mbps']:.1f} Mbit/s) "
            f"over {over_text(result)}; {result.resends} block re-sends"
            + (f"; {len(journal.resumed)} blocks were already at {args.to} (resumed)" if journal.resumed else "")
        )
        if fed is not None:
            used = sum(1 for r in fed.replicas if r.bytes)
            console.print(f"fed from {used} of {len(fed.replicas)} replicas: " + ", ".join(
                f"{r.url} {r.share:.0%}" for r in fed.replicas))
        console.print(f"manifest: {manifest_path} (fetch with: lnet-get {manifest_path} -o {name})")
    return int(ExitCode.OK)



if __name__ == "__main__":
    sys.exit(main())
