"""``lnet-send`` after parsing: check the arguments, run ``sending.send`` on a file, a directory tree or a file
arriving from its replicas, and turn the outcome into the manifest, the edge memory, the report, the summary or
``--json`` object, and the exit code. Progress bars and path-change lines are shown from the relay's events.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio
from rich.console import Console

from lnet.client.commands import replica_options
from lnet.client.commands.output import CommandOutput, transfer_progress
from lnet.client.commands.send import DEFAULT_DURATION_S, DEFAULT_MAX_PATHS
from lnet.client.engines import smallfiles
from lnet.client.engines.chunks import PlanConfig
from lnet.client.exits import ExitCode, is_interrupt
from lnet.client.fetching.mirrors import MirrorResult, ReplicaOptions
from lnet.client.formats import tree
from lnet.client.formats.overlay import Overlay, OverlayError
from lnet.client.sending.relay import (
    BlockDelivered,
    Note,
    PathChanged,
    PathShares,
    RelayConfig,
    RelayEvent,
    RelayResult,
)
from lnet.client.sending.resume import (
    ResumeRefused,
    SendJournal,
    file_header,
    journal_path,
    source_header,
    tree_header,
)
from lnet.client.sending.send import (
    SendOptions,
    build_manifest,
    failure_exit,
    final_path,
    interrupted,
    over_text,
    save_report,
    send,
    send_from_replicas,
    shares_text,
    source_name,
    summary,
)
from lnet.client.sending.tree import ASSUMED_RATE_BPS, FileArrivals, PackedTree, is_priority, round_trip
from lnet.depot.protocol import innermost
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.units import format_size, parse_duration, parse_size

__all__ = ["run"]


def scheduler_config(args: argparse.Namespace) -> SchedulerConfig:
    """The scheduler's settings from the command line (``--max-paths``, already checked by ``main``)."""
    return SchedulerConfig(max_paths=args.max_paths)


class _SendProgress:
    """The live progress bar of ``lnet-send`` (a file, or a tree's files), and one line per path change or note.

    For a tree it also feeds ``arrivals`` (which files are complete), which the ``--json`` summary reports."""

    def __init__(
        self, console: Console, total: int, *, show: bool, lines: bool, arrivals: FileArrivals | None = None,
    ) -> None:
        self.console, self.lines, self.arrivals = console, lines, arrivals
        self.t0: float | None = None
        labels = ["[bold]{task.fields[shares]}"]
        if arrivals is not None:
            labels = ["[bold]{task.fields[files]}", "{task.fields[shares]}"]
        self.progress = transfer_progress(console, *labels, enabled=show, transient=True)
        self.task = self.progress.add_task("send", total=total, files=self._files(), shares="")

    def _files(self) -> str:
        return f"{len(self.arrivals.arrived)}/{self.arrivals.total_files} files" if self.arrivals else ""

    def __call__(self, event: RelayEvent) -> None:
        if self.t0 is None:
            self.t0 = event.at
            if self.arrivals is not None:
                self.arrivals.start(0.0)
        if isinstance(event, BlockDelivered):
            if self.arrivals is not None:
                self.arrivals.delivered(event.index, event.at - self.t0)
            self.progress.update(self.task, advance=event.nbytes, files=self._files())
        elif isinstance(event, PathShares):
            self.progress.update(self.task, shares=shares_text(event, event.delivered))
        elif isinstance(event, PathChanged):
            self.progress.update(self.task, shares=" -> ".join(event.path) if len(event.paths) <= 1 else "")
            if self.lines:
                self.console.print(path_change_text(event))
        elif isinstance(event, Note) and self.lines:
            self.console.print(f"[yellow]{event.text}[/yellow]")


def path_change_text(event: PathChanged) -> str:
    """``path (better): a -> b -> c``; with several paths, all of them, the primary first."""
    if len(event.paths) <= 1:
        return f"path ({event.reason}): {' -> '.join(event.path)}"
    return f"{len(event.paths)} paths ({event.reason}): " + " | ".join(" -> ".join(p) for p in event.paths)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """``lnet-send`` once its arguments are parsed: checks them, then sends a file, a tree or a file from its
    replicas, and turns the outcome into output and an exit code."""
    out = CommandOutput("lnet-send")
    fail = out.fail

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
    bad = [url for url in args.source if not replica_options.is_url(url)]
    if bad:
        return fail(ExitCode.USAGE, f"--source {bad[0]}: not an http(s) URL")
    if len(set(args.source)) != len(args.source):
        return fail(ExitCode.USAGE, "--source: a URL is given twice")
    try:
        plan = replica_options.plan_config(args, timeout)
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
    if args.file is not None and args.file.is_dir():  # a tree: planned and packed here, sent by send()
        name = args.file.resolve().name or "tree"
        manifest_path = args.manifest or Path(f"{name}.manifest.json")
        return _with_journal(out, args, manifest_path, lambda journal: _send_tree(
            args, overlay, relay_config, pinned, memory, memory_path, out, argv, journal, manifest_path))
    name = args.file.name if args.file is not None else source_name(args.source)
    manifest_path = args.manifest or Path(f"{name}.manifest.json")
    return _with_journal(out, args, manifest_path, lambda journal: _send_file(
        args, argv, out, name, manifest_path, journal, overlay, relay_config, pinned, memory, memory_path, plan,
        timeout))


def _with_journal(
    out: CommandOutput, args: argparse.Namespace, manifest_path: Path, body: Callable[[SendJournal], int],
) -> int:
    """Run ``body`` with the transfer's send journal open (it resumes an interrupted run of this transfer,
    ``lnet.client.sending.resume``); a journal that recorded nothing is removed: nothing to resume."""
    try:
        journal = SendJournal.open(journal_path(manifest_path), restart=args.restart)
    except ResumeRefused as exc:
        return out.fail(ExitCode.USAGE, str(exc))
    try:
        return body(journal)
    finally:
        if not journal.records:
            journal.remove()
        journal.close()


Sent = tuple[RelayResult, PathScheduler | None, list[str]]


def _relay(
    out: CommandOutput, args: argparse.Namespace, argv: list[str], journal: SendJournal, subject: Path | None,
    progress: _SendProgress, go: Callable[[], Sent],
) -> Sent | int:
    """Run the transfer ``go`` under the progress bar; a failure or Ctrl-C becomes its message and exit code
    (with the command that resumes, when blocks are already at the destination)."""
    try:
        with progress.progress:
            return go()
    except BaseException as exc:  # Ctrl-C comes out of trio.run bare, or in a group from a nursery
        if is_interrupt(exc):
            return out.fail(ExitCode.INTERRUPTED, interrupted(journal, args.to, argv))
        if not isinstance(exc, Exception):
            raise
        mapped = failure_exit(exc, subject)  # anything else is a bug: re-raised
        if mapped is None:
            raise
        code = out.fail(*mapped)
        if journal.records and mapped[0] != ExitCode.USAGE:
            out.note(interrupted(journal, args.to, argv, what="stopped"))
        return code


def _delivered(
    out: CommandOutput, args: argparse.Namespace, memory: EdgeMemory, memory_path: Path, result: RelayResult,
    scheduler: PathScheduler | None, name: str, size: int,
) -> dict[str, Any]:
    """After a delivery: the edge memory saved for the next warm start, the summary, and ``--report``."""
    try:
        memory.save(memory_path)
    except OSError as exc:
        out.note(f"could not save the edge memory to {memory_path}: {exc}")
    report = summary(result, scheduler, size)
    if args.report is not None:
        save_report(args.report, name, size, report)
    return report


def _send_file(
    args: argparse.Namespace, argv: list[str], out: CommandOutput, name: str, manifest_path: Path,
    journal: SendJournal, overlay: Overlay, relay_config: RelayConfig, pinned: list[str] | None,
    memory: EdgeMemory, memory_path: Path, plan: PlanConfig, timeout: float,
) -> int:
    """One file, or one file from its replicas (``--source``), with its journal open."""
    fail, console = out.fail, out.err

    dest_url = overlay.depots[args.to].url
    if args.file is not None:
        try:
            journal.begin(file_header(args.file, dest_url, relay_config))
        except ResumeRefused as exc:
            return fail(ExitCode.USAGE, str(exc))
    size = args.file.stat().st_size if args.file is not None else 0
    show = not args.no_progress and not args.json and console.is_terminal
    progress = _SendProgress(console, size, show=show, lines=not args.json)
    options = SendOptions(
        overlay, args.to, pinned, memory, warm=not args.cold, relay_config=relay_config,
        scheduler_config=scheduler_config(args), timeout_s=timeout, on_event=progress,
        longest_duration=args.duration is None, journal=journal,
    )
    fed: MirrorResult | None = None
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
        replicas = ReplicaOptions(
            plan, timeout, args.sha256, not args.ignore_validators,
            args.history if args.history is not None else replica_options.history_path())
        result, scheduler, skipped, fed = await send_from_replicas(
            args.source, spool / name, replicas=replicas, on_size=sized, options=options)
        return result, scheduler, skipped

    def go() -> Sent:
        if args.file is not None:
            return trio.run(options.send, args.file)
        if args.restart:
            shutil.rmtree(spool, ignore_errors=True)
        spool.mkdir(mode=0o700, parents=True, exist_ok=True)
        return trio.run(from_replicas, spool)

    sent = _relay(out, args, argv, journal, args.file, progress, go)
    if isinstance(sent, int):
        return sent
    result, scheduler, skipped = sent
    final = final_path(result)
    manifest = build_manifest(Path(name), dest_url, result, relay_config, final)
    manifest.save(manifest_path)
    journal.remove()
    if args.source:
        shutil.rmtree(spool, ignore_errors=True)
    report = _delivered(out, args, memory, memory_path, result, scheduler, name, size)
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


def _send_tree(
    args: argparse.Namespace, overlay: Overlay, relay_config: RelayConfig, pinned: list[str] | None,
    memory: EdgeMemory, memory_path: Path, out: CommandOutput, argv: list[str], journal: SendJournal,
    manifest_path: Path,
) -> int:
    """``lnet-send DIR``, with its journal open: walk, plan, pack, send the stream, write the tree manifest."""
    fail, console = out.fail, out.err
    root: Path = args.file
    name = root.resolve().name or "tree"
    try:
        entries = tree.walk(root)
        fixed = args.pipeline_depth
        if fixed is not None and fixed < 1:
            raise ValueError("--pipeline-depth must be at least 1")
        bdp_given = parse_size(args.bdp) if args.bdp is not None else None
    except (OSError, ValueError) as exc:
        return fail(ExitCode.USAGE, str(exc))
    patterns: list[str] = args.priority or []
    files = [
        smallfiles.FileItem(i, e.size, is_priority(e.path, patterns))
        for i, e in enumerate(entries) if e.type == "file"
    ]
    first_hop = pinned[1] if pinned is not None else args.to
    previous = journal.previous
    if bdp_given is None and previous is not None and previous.kind == "tree" and previous.bdp > 0:
        bdp_given = previous.bdp  # a resume plans for the same BDP, so that the blocks come out the same
    if bdp_given is None:
        try:
            hop = overlay.depots[first_hop]
            rtt = trio.run(round_trip, hop.url, relay_config.timeout_s, hop.token)
        except Exception as exc:  # noqa: BLE001 - the depot check in send() says it better
            return fail(ExitCode.UNREACHABLE, f"{first_hop} does not answer: {innermost(exc)}")
        rate = memory.estimate(overlay.here, first_hop) or ASSUMED_RATE_BPS
        bdp = max(1, round(rate * rtt))
    else:
        bdp, rtt, rate = max(1, bdp_given), 0.0, 0.0
    limits = smallfiles.PlannerLimits(
        block_size=relay_config.block_size, min_depth=relay_config.min_inflight, max_depth=relay_config.max_inflight
    )
    plan = smallfiles.plan(files, bdp, limits, fixed_pp=fixed)
    packed = PackedTree(root, entries, list(plan.blocks))
    mean_block = max(1, packed.stream.size // max(1, len(plan.blocks)))
    if fixed is not None:
        config = replace(relay_config, min_inflight=fixed, initial_inflight=fixed, max_inflight=fixed,
                         window_block=mean_block)
    else:
        config = replace(relay_config, initial_inflight=plan.depth, window_block=mean_block)
    try:
        journal.begin(tree_header(root, entries, packed.stream, packed.block_pieces(), overlay.depots[args.to].url,
                                  config, bdp))
    except ResumeRefused as exc:
        return fail(ExitCode.USAGE, str(exc))
    arrivals = FileArrivals(entries, list(plan.blocks))
    size = packed.stream.size
    show = not args.no_progress and not args.json and console.is_terminal
    progress = _SendProgress(console, size, show=show, lines=not args.json, arrivals=arrivals)
    sent = _relay(out, args, argv, journal, root, progress, lambda: trio.run(
        lambda: send(
            packed.stream, overlay, args.to, pinned=pinned, memory=memory, warm=not args.cold, relay_config=config,
            scheduler_config=scheduler_config(args), timeout_s=relay_config.timeout_s, on_event=progress,
            longest_duration=args.duration is None, journal=journal,
        )
    ))
    if isinstance(sent, int):
        return sent
    result, scheduler, skipped = sent
    final = final_path(result)
    stream_manifest = build_manifest(Path(name), overlay.depots[args.to].url, result, config, final)
    manifest = tree.TreeManifest(
        name=name, created=time.time(), entries=tuple(entries),
        blocks=tuple(tuple(tree.TreePiece(**p) for p in pieces) for pieces in packed.block_pieces()),
        stream=stream_manifest,
    )
    manifest.save(manifest_path)
    journal.remove()
    report = _delivered(out, args, memory, memory_path, result, scheduler, name, size)
    plan_summary = {
        "bdp": plan.bdp, "rtt_s": rtt, "rate_bps": rate, "pp": plan.pp, "new_pp": plan.new_pp, "times": plan.times,
        "big_files": plan.n_big,
        "transfer": plan.transfer, "depth": plan.depth, "fixed": plan.fixed, "batches": len(plan.batches),
        "blocks": len(plan.blocks), "mean_block": mean_block,
    }
    if args.json:
        print(json.dumps({
            **report, "file": str(root), "manifest": str(manifest_path), "path": final,
            "skipped_depots": skipped, "resumed_blocks": len(journal.resumed), "files": arrivals.total_files,
            "entries": len(entries), "plan": plan_summary,
            "arrivals": [
                {"path": entries[key].path, "t": round(t, 4), "priority": is_priority(entries[key].path, patterns)}
                for key, t in arrivals.arrived
            ],
        }))
    else:
        console.print(
            f"sent {arrivals.total_files} files ({len(entries)} entries, {format_size(size)}) in "
            f"{result.seconds:.1f} s ({report['mbps']:.1f} Mbit/s) over {over_text(result)}; "
            f"{len(plan.blocks)} blocks, pipelining depth {plan.depth}{' (fixed)' if plan.fixed else ''}, "
            f"{result.resends} block re-sends"
        )
        console.print(f"manifest: {manifest_path} (fetch with: lnet-get {manifest_path} -o {name})")
    return int(ExitCode.OK)
