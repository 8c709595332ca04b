"""The I/O shells for directory trees: ``lnet-send DIR`` and ``lnet-get TREE-MANIFEST -o DIR``.

``send_directory`` walks the tree, measures the round trip to the destination, asks the small-file planner
(``smallfiles.plan``, pure) for the queue, the packed blocks and the pipelining depth, and runs them through
``send.send`` (the same relay, scheduler, integrity checks and edge memory as a single file) as one
``relay.Stream``. It follows which file is complete at the destination from the relay's ``BlockDelivered``
events, for the progress display and for the ``--json`` summary's ``arrivals`` (each file's time, in order).

``get_directory`` fetches the packed stream with ``get.get_file`` (verified block by block, resumable: a re-run
fetches only what is missing) into ``DIR.lnet-stream``, then ``tree.rebuild`` puts the tree in place and the stream
file is removed. The decisions live in ``smallfiles`` and ``tree``; this module only carries them out.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from lnet.depot.protocol import innermost
from lnet.scheduler import EdgeMemory
from lnet.units import format_size, parse_size

from . import get, send, smallfiles, tree
from .depot_client import DepotClient
from .exits import ExitCode
from .manifest import ManifestError, block_hasher
from .overlay import Overlay, OverlayError
from .relay import BlockDelivered, Note, PathChanged, PathShares, RelayConfig, RelayEvent
from .resume import ResumeRefused, SendJournal, is_interrupt, journal_path, tree_header

__all__ = ["ASSUMED_RATE_BPS", "FileArrivals", "get_directory", "get_directory_main", "send_directory"]

ASSUMED_RATE_BPS = 125e6
"""Bytes/s taken for the first hop when the edge memory knows nothing of it (1 Gbit/s). Guessing high only packs
more files together and starts with a deeper window, which the relay shrinks to what it measures."""
RTT_SAMPLES = 5


class FileArrivals:
    """Which files are complete at the destination, from the blocks delivered (pure: fed events)."""

    def __init__(self, entries: list[tree.Entry], blocks: list[smallfiles.PlannedBlock]) -> None:
        self.entries = entries
        self.blocks = blocks
        self.missing = {i: e.size for i, e in enumerate(entries) if e.type == "file" and e.size > 0}
        self.arrived: list[tuple[int, float]] = []
        self.total_files = sum(1 for e in entries if e.type == "file")
        self.empty = [i for i, e in enumerate(entries) if e.type == "file" and e.size == 0]

    def start(self, t: float) -> None:
        """Empty files carry no bytes: they are there as soon as the transfer starts."""
        self.arrived.extend((i, t) for i in self.empty)
        self.empty = []

    def delivered(self, index: int, t: float) -> None:
        for piece in self.blocks[index].pieces:
            self.missing[piece.key] -= piece.length
            if self.missing[piece.key] == 0:
                del self.missing[piece.key]
                self.arrived.append((piece.key, t))


class _TreeProgress:
    def __init__(self, console: Console, arrivals: FileArrivals, total: int, enabled: bool) -> None:
        self.console, self.arrivals, self.enabled = console, arrivals, enabled
        self.t0: float | None = None
        self.progress = Progress(
            TextColumn("[bold]{task.fields[files]}"), TextColumn("{task.fields[shares]}"), BarColumn(),
            DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True,
        )
        self.task = self.progress.add_task("send", total=total, files=self._files(), shares="")

    def _files(self) -> str:
        return f"{len(self.arrivals.arrived)}/{self.arrivals.total_files} files"

    def __call__(self, event: RelayEvent) -> None:
        if self.t0 is None:
            self.t0 = event.at
            self.arrivals.start(0.0)
        if isinstance(event, BlockDelivered):
            self.arrivals.delivered(event.index, event.at - self.t0)
            self.progress.update(self.task, advance=event.nbytes, files=self._files())
        elif isinstance(event, PathShares):
            self.progress.update(self.task, shares=send.shares_text(event, event.delivered))
        elif isinstance(event, PathChanged):
            if len(event.paths) <= 1:
                self.progress.update(self.task, shares="")
            if self.enabled:
                self.console.print(send.path_change_text(event))
        elif isinstance(event, Note) and self.enabled:
            self.console.print(f"[yellow]{event.text}[/yellow]")


async def _round_trip(url: str, timeout_s: float, token: str | None = None) -> float:
    """The shortest of a few control round trips to ``url`` (the first opens the connection, so it is not used);
    ``token`` for a depot that requires its operator token for status."""
    async with DepotClient(url, token=token, timeout=timeout_s) as client:
        await client.status()
        best = float("inf")
        for _ in range(RTT_SAMPLES):
            started = trio.current_time()
            await client.status()
            best = min(best, trio.current_time() - started)
    return best


def _is_priority(path: str, patterns: list[str]) -> bool:
    name = path.rpartition("/")[2]
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def send_directory(
    args: argparse.Namespace, overlay: Overlay, relay_config: RelayConfig, pinned: list[str] | None,
    memory: EdgeMemory, memory_path: Path, console: Console, argv: list[str],
) -> int:
    """``lnet-send DIR``: the arguments are ``send``'s, already checked by its ``main``."""

    def fail(code: ExitCode, message: str) -> int:
        console.print(f"lnet-send: {message}")
        return int(code)

    root: Path = args.file
    name = root.resolve().name or "tree"
    manifest_path = args.manifest or Path(f"{name}.manifest.json")
    try:  # resumes an interrupted run of this transfer (lnet.client.resume)
        journal = SendJournal.open(journal_path(manifest_path), restart=args.restart)
    except ResumeRefused as exc:
        return fail(ExitCode.USAGE, str(exc))
    try:
        return _send_tree(args, overlay, relay_config, pinned, memory, memory_path, console, argv, journal,
                          manifest_path)
    finally:
        if not journal.records:
            journal.remove()  # no block is at the destination: nothing to resume
        journal.close()


def _send_tree(
    args: argparse.Namespace, overlay: Overlay, relay_config: RelayConfig, pinned: list[str] | None,
    memory: EdgeMemory, memory_path: Path, console: Console, argv: list[str], journal: SendJournal,
    manifest_path: Path,
) -> int:
    def fail(code: ExitCode, message: str) -> int:
        console.print(f"lnet-send: {message}")
        return int(code)

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
        smallfiles.FileItem(i, e.size, _is_priority(e.path, patterns))
        for i, e in enumerate(entries) if e.type == "file"
    ]
    first_hop = pinned[1] if pinned is not None else args.to
    previous = journal.previous
    if bdp_given is None and previous is not None and previous.kind == "tree" and previous.bdp > 0:
        bdp_given = previous.bdp  # a resume plans for the same BDP, so that the blocks come out the same
    if bdp_given is None:
        try:
            hop = overlay.depots[first_hop]
            rtt = trio.run(_round_trip, hop.url, relay_config.timeout_s, hop.token)
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
    packed = tree.PackedTree(root, entries, list(plan.blocks))
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
    progress = _TreeProgress(console, arrivals, size, enabled=not args.json)
    try:
        with progress.progress if show else contextlib.nullcontext():
            result, scheduler, skipped = trio.run(
                lambda: send.send(
                    packed.stream, overlay, args.to, pinned=pinned, memory=memory, warm=not args.cold,
                    relay_config=config, scheduler_config=send.scheduler_config(args),
                    timeout_s=relay_config.timeout_s, on_event=progress, longest_duration=args.duration is None,
                    journal=journal,
                )
            )
    except BaseException as exc:  # Ctrl-C comes out of trio.run bare, or in a group from a nursery
        if is_interrupt(exc):
            return fail(ExitCode.INTERRUPTED, send.interrupted(journal, args.to, argv))
        if not isinstance(exc, Exception):
            raise
        mapped = send.failure_exit(exc, root)  # as for a file; anything else re-raised
        if mapped is None:
            raise
        code = fail(*mapped)
        if journal.records and mapped[0] != ExitCode.USAGE:
            console.print(f"lnet-send: {send.interrupted(journal, args.to, argv, what='stopped')}")
        return code
    final_path = send.final_path(result)
    stream_manifest = send.build_manifest(Path(name), overlay.depots[args.to].url, result, config, final_path)
    manifest = tree.TreeManifest(
        name=name, created=time.time(), entries=tuple(entries),
        blocks=tuple(tuple(tree.TreePiece(**p) for p in pieces) for pieces in packed.block_pieces()),
        stream=stream_manifest,
    )
    manifest.save(manifest_path)
    journal.remove()
    try:
        memory.save(memory_path)
    except OSError as exc:
        console.print(f"lnet-send: could not save the edge memory to {memory_path}: {exc}")
    report = send.summary(result, scheduler, size)
    if args.report is not None:
        send.save_report(args.report, name, size, report)
    plan_summary = {
        "bdp": plan.bdp, "rtt_s": rtt, "rate_bps": rate, "pp": plan.pp, "new_pp": plan.new_pp, "times": plan.times,
        "big_files": plan.n_big,
        "transfer": plan.transfer, "depth": plan.depth, "fixed": plan.fixed, "batches": len(plan.batches),
        "blocks": len(plan.blocks), "mean_block": mean_block,
    }
    if args.json:
        print(json.dumps({
            **report, "file": str(root), "manifest": str(manifest_path), "path": final_path,
            "skipped_depots": skipped, "resumed_blocks": len(journal.resumed), "files": arrivals.total_files,
            "entries": len(entries), "plan": plan_summary,
            "arrivals": [
                {"path": entries[key].path, "t": round(t, 4), "priority": _is_priority(entries[key].path, patterns)}
                for key, t in arrivals.arrived
            ],
        }))
    else:
        console.print(
            f"sent {arrivals.total_files} files ({len(entries)} entries, {format_size(size)}) in "
            f"{result.seconds:.1f} s ({report['mbps']:.1f} Mbit/s) over {send.over_text(result)}; "
            f"{len(plan.blocks)} blocks, pipelining depth {plan.depth}{' (fixed)' if plan.fixed else ''}, "
            f"{result.resends} block re-sends"
        )
        console.print(f"manifest: {manifest_path} (fetch with: lnet-get {manifest_path} -o {name})")
    return int(ExitCode.OK)


# -- lnet-get of a tree -------------------------------------------------------------------------------------------


def stream_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-stream")


def _stream_is_whole(path: Path, manifest: tree.TreeManifest) -> bool:
    """Whether an earlier run left the whole verified stream (it was renamed into place only once verified; the
    hash is checked again all the same, since anything may have touched it since)."""
    stream = manifest.stream
    try:
        if path.stat().st_size != stream.size:
            return False
        hasher = block_hasher(stream.hash_algorithm)
        with path.open("rb") as f:
            while chunk := f.read(get.HASH_CHUNK):
                hasher.update(chunk)
    except OSError:
        return False
    return hasher.hexdigest() == stream.file_hash


def _check_output(out: Path) -> None:
    if os.path.lexists(out) and not out.is_dir():
        raise get.OutputError(f"{out} exists and is not a directory")


async def get_directory(
    manifest: tree.TreeManifest, out: Path, *, parallel: int = get.DEFAULT_PARALLEL,
    timeout_s: float = get.DEFAULT_TIMEOUT_S, on_progress: Any = None, tokens: Mapping[str, str] | None = None,
) -> get.GetResult:
    """Fetch the tree's stream (resuming), then rebuild the tree under ``out`` and remove the stream file."""
    spool = stream_path(out)
    _check_output(out)
    started = trio.current_time()
    if await trio.to_thread.run_sync(_stream_is_whole, spool, manifest):
        if on_progress is not None:
            on_progress(manifest.size)
        result = get.GetResult(spool, manifest.size, 0.0, len(manifest.stream.blocks), len(manifest.stream.blocks),
                               0, 0)
    else:
        result = await get.get_file(manifest.stream, spool, parallel=parallel, timeout_s=timeout_s,
                                    on_progress=on_progress, tokens=tokens)
    try:
        await trio.to_thread.run_sync(tree.rebuild, manifest, spool, out)
    except OSError as exc:
        raise get.OutputError(f"{out}: {exc.strerror or exc}") from None
    except tree.RebuildError as exc:
        raise get.OutputError(str(exc)) from None
    os.unlink(spool)
    return replace(result, path=out, seconds=trio.current_time() - started)


def get_directory_main(args: argparse.Namespace, err: Console) -> int:
    """``lnet-get TREE-MANIFEST -o DIR``: the arguments are ``get``'s."""

    def fail(code: ExitCode, message: str) -> int:
        err.print(f"lnet-get: {message}", markup=False, soft_wrap=True)
        if args.json:
            print(json.dumps({"ok": False, "exit": int(code), "error": message, "path": str(args.output)}))
        return int(code)

    try:
        manifest = tree.load(args.manifest)
    except ManifestError as exc:
        return fail(ExitCode.USAGE, f"invalid manifest: {exc}")
    try:
        tokens = get.depot_tokens(args.depots)
    except OverlayError as exc:
        return fail(ExitCode.USAGE, str(exc))
    show_progress = not args.no_progress and err.is_terminal
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=err, disable=not show_progress,
    )
    task = progress.add_task(manifest.name, total=manifest.size)
    try:
        with progress:
            result = trio.run(partial(
                get_directory, manifest, args.output, parallel=args.parallel, timeout_s=args.timeout,
                on_progress=lambda nbytes: progress.advance(task, nbytes), tokens=tokens,
            ))
    except get.GetError as exc:
        return fail(exc.exit_code, str(exc))
    except KeyboardInterrupt:
        return fail(ExitCode.INTERRUPTED, "interrupted; run the same command to resume")
    files = len(manifest.files())
    if args.json:
        print(json.dumps({**result.to_dict(), "files": files, "entries": len(manifest.entries)}))
    else:
        print(f"{args.output}: {files} files ({len(manifest.entries)} entries, {format_size(manifest.size)}) "
              f"verified and in place in {result.seconds:.2f} s")
    return int(ExitCode.OK)
