"""``lnet-send`` after parsing: check the arguments (``SendArgs``), run ``sending.send`` on a file, a directory
tree or a file arriving from its replicas, reaching the network through the command's ``ClientIO``, and hand
the outcome (``Delivered`` or ``Failed``) to ``commands.outcome.finish``, which writes the manifest, the edge
memory and the report and shows the summary or ``--json`` object. Progress bars and path-change lines are shown
from the relay's events while it runs.
"""

from __future__ import annotations

import gc
import hashlib
import json
import shlex
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from lnet.client.commands import replica_options
from lnet.client.commands.clientio import ClientIO
from lnet.client.commands.directory_use import (
    discovered,
    membership_follower,
    share_memory,
    start_from_overlay_memory,
)
from lnet.client.commands.outcome import Delivered, Failed, Outcome, TreeSent, finish
from lnet.client.commands.output import CommandOutput, transfer_progress
from lnet.client.commands.send_args import DEFAULT_DURATION_S, DEFAULT_HASH, DEFAULT_MAX_PATHS, SendArgs
from lnet.client.engines import smallfiles
from lnet.client.engines.chunks import PlanConfig
from lnet.client.exits import ExitCode, is_interrupt, run_interruptible
from lnet.client.fetching.mirrors import MirrorResult, ReplicaOptions
from lnet.client.formats import tree
from lnet.client.formats.manifest import Manifest
from lnet.client.formats.overlay import Overlay, OverlayError
from lnet.client.sending.publish import Published, ReceiverProgress
from lnet.client.sending.relay import (
    BlockDelivered,
    Note,
    PathChanged,
    PathShares,
    Relay,
    RelayConfig,
    RelayResult,
    SpaceWait,
    Traced,
)
from lnet.client.sending.resume import (
    ResumeRefused,
    SendJournal,
    file_header,
    journal_path,
    resume_command,
    source_header,
    tree_header,
)
from lnet.client.sending.send import (
    PublishOptions,
    SendEvent,
    SendOptions,
    build_manifest,
    failure_exit,
    final_path,
    interrupted,
    send_from_replicas,
    shares_text,
    source_name,
)
from lnet.client.sending.tree import ASSUMED_RATE_BPS, FileArrivals, PackedTree, is_priority, round_trip
from lnet.protocol import innermost
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.units import parse_duration, parse_size

__all__ = ["main_parsed", "scheduler_config", "transfer"]


def scheduler_config(args: SendArgs) -> SchedulerConfig:
    """The scheduler's settings from the command line (``--max-paths``, checked by ``transfer``)."""
    return SchedulerConfig(max_paths=args.max_paths if args.max_paths is not None else DEFAULT_MAX_PATHS)


class _SendProgress:
    """The live progress bar of ``lnet-send`` (a file, or a tree's files), one line per path change (``lines``) and
    one per note, always; the receiver's command once the publication is in place (``name``: what it writes),
    and, on the bar, a full depot waited for and what the receiver drained (``--follow``).

    For a tree it also feeds ``arrivals`` (which files are complete), which the ``--json`` summary reports."""

    def __init__(
        self, console: Console, total: int, *, show: bool, lines: bool, arrivals: FileArrivals | None = None,
        trace: Path | None = None, name: str = "", blocks: int = 0,
    ) -> None:
        self.console, self.lines, self.arrivals = console, lines, arrivals
        self.trace = None if trace is None else trace.open("w", encoding="utf-8", buffering=1)
        self.t0: float | None = None
        self.name, self.blocks = name, blocks
        self.receive_url: str | None = None
        self.receiver: ReceiverProgress | None = None
        self.full: set[str] = set()
        self.said_full = False
        self.follow = False
        labels = ["[bold]{task.fields[shares]}", "{task.fields[state]}"]
        if arrivals is not None:
            labels = ["[bold]{task.fields[files]}", "{task.fields[shares]}", "{task.fields[state]}"]
        self.progress = transfer_progress(console, *labels, enabled=show, transient=True)
        self.task = self.progress.add_task("send", total=total, files=self._files(), shares="", state="")

    def _files(self) -> str:
        return f"{len(self.arrivals.arrived)}/{self.arrivals.total_files} files" if self.arrivals else ""

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()
            self.trace = None

    def _state(self) -> str:
        """The other end and the depots' room, for the bar: ``waiting for the receiver (drained 12/256)``."""
        parts = []
        if self.full:
            who = "the receiver" if self.follow else "room"
            parts.append(f"waiting for {who} at {', '.join(sorted(self.full))}")
        if self.receiver is not None:
            parts.append(f"receiver drained {self.receiver.drained}/{self.blocks or '?'}"
                         + (f" ({self.receiver.state})" if self.receiver.state != "receiving" else ""))
        elif self.follow:
            parts.append("no receiver yet")
        return "; ".join(parts)

    def __call__(self, event: SendEvent) -> None:
        if isinstance(event, Traced):
            if self.trace is not None:
                self.trace.write(json.dumps({"kind": event.kind, **event.data}) + "\n")
            return
        if isinstance(event, Published):
            self.receive_url, self.follow = event.url, event.follow
            # the one place the URL is shown: on stderr, with --json too (where it is also receive_url)
            follow = " --follow" if event.follow else ""
            self.console.print(f"at the far end: lnet-get {event.url} -o {shlex.quote(self.name)}{follow}",
                               soft_wrap=True, highlight=False)
            self.progress.update(self.task, state=self._state())
            return
        if isinstance(event, ReceiverProgress):
            if self.receiver is None and event.drained:
                self.console.print("the receiver is draining the destination")
            self.receiver = event
            self.progress.update(self.task, state=self._state())
            return
        if isinstance(event, SpaceWait):
            if event.waiting:
                if not self.said_full:  # once a run, on a line; the bar shows every wait
                    self.said_full = True
                    who = "the receiver" if self.follow else "room"
                    self.console.print(f"waiting for {who} at {event.depot}: it is full (at most --space-wait)")
                self.full.add(event.depot)
            else:
                self.full.discard(event.depot)
            self.progress.update(self.task, state=self._state())
            return
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
        elif isinstance(event, Note):  # a warning (a re-send, a depot left out): on stderr with --json too
            self.console.print(f"[yellow]{event.text}[/yellow]")


def path_change_text(event: PathChanged) -> str:
    """``path (better): a -> b -> c``; with several paths, all of them, the primary first."""
    if len(event.paths) <= 1:
        return f"path ({event.reason}): {' -> '.join(event.path)}"
    return f"{len(event.paths)} paths ({event.reason}): " + " | ".join(" -> ".join(p) for p in event.paths)


def main_parsed(args: SendArgs, argv: list[str], io: ClientIO) -> int:
    """``lnet-send`` once its arguments are parsed: ``transfer`` in its own trio loop. Ctrl-C during a transfer
    is answered there (with what was delivered and how to resume); before or after one, here."""
    out = CommandOutput("lnet-send")
    # What the imports made lives as long as the process: out of the collector's way, so that its full
    # collections during a transfer do not walk it again and again (2.4% of lnet-send's samples on the chain).
    gc.freeze()
    try:
        return run_interruptible(transfer, args, argv, io, out)
    except BaseException as exc:
        if not is_interrupt(exc):
            raise
        return finish(out, Failed(ExitCode.INTERRUPTED, f"interrupted; run the same command again: "
                                  f"{resume_command(argv)}"), as_json=args.json)


async def transfer(args: SendArgs, argv: list[str], io: ClientIO, out: CommandOutput | None = None) -> int:
    """Check the arguments, then send a file, a tree or a file from its replicas; the outcome goes to
    ``finish``. ``argv`` is what the resume hint repeats."""
    out = out or CommandOutput("lnet-send")
    memory_path = args.memory or EdgeMemory.default_path()
    found = await discovered(args, out, memory_path.parent)
    if isinstance(found, Failed):
        return finish(out, found, as_json=args.json)
    prepared = _prepare(args, found.overlay if found is not None else None)
    if isinstance(prepared, Failed):
        return finish(out, prepared, as_json=args.json)
    overlay, relay_config, pinned, plan = prepared
    memory = EdgeMemory() if args.cold else EdgeMemory.load(memory_path)
    if not args.cold:
        await start_from_overlay_memory(found, memory, out.note)
    run = _Send(args, argv, io, out, overlay, relay_config, pinned, memory, memory_path)
    if found is not None and found.ref is not None and pinned is None:
        run.membership = membership_follower(found, io.transport, relay_config.timeout_s, out.note)
    code = await _send_it(run, args, plan)
    if code == ExitCode.OK:
        await share_memory(found, overlay.here, memory, memory_path.parent, out.note)
    return code


async def _send_it(run: _Send, args: SendArgs, plan: PlanConfig) -> int:
    """The file or the tree sent, its outcome finished; the exit code."""
    if args.file is not None and args.file.is_dir():  # a tree: planned and packed here, sent by send()
        name = args.file.resolve().name or "tree"
        manifest_path = args.manifest or Path(f"{name}.manifest.json")
        return await run.with_journal(manifest_path, lambda journal: run.send_tree(journal, name, manifest_path))
    name = args.file.name if args.file is not None else source_name(args.source)
    manifest_path = args.manifest or Path(f"{name}.manifest.json")
    return await run.with_journal(
        manifest_path, lambda journal: run.send_file(journal, name, manifest_path, plan))


Prepared = tuple[Overlay, RelayConfig, list[str] | None, PlanConfig]
M = TypeVar("M")


def _once(make: Callable[[RelayResult], M]) -> Callable[[RelayResult], M]:
    """``make`` called on the first result only: the publication's final manifest and the one written here are
    one document (its ``created`` time included)."""
    made: list[M] = []

    def once(result: RelayResult) -> M:
        if not made:
            made.append(make(result))
        return made[0]

    return once


def _prepare(args: SendArgs, overlay: Overlay | None = None) -> Prepared | Failed:
    """The arguments checked and turned into what the transfer takes (a usage failure otherwise). ``overlay``:
    the depots file and directory's, when ``discovered`` (else the depots file is read here)."""
    try:
        overlay = overlay or Overlay.load(args.depots)
        block_size = parse_size(args.block_size)
        duration = parse_duration(args.duration) if args.duration is not None else DEFAULT_DURATION_S
        timeout = parse_duration(args.timeout)
        space_wait = parse_duration(args.space_wait)
        if not space_wait > 0:
            raise ValueError("--space-wait must be more than 0")
        relay_config = RelayConfig(
            space_wait_s=space_wait,
            block_size=block_size,
            duration_s=duration,
            timeout_s=timeout,
            max_inflight=args.max_inflight,
            initial_inflight=min(4, args.max_inflight),
            min_inflight=min(2, args.max_inflight),
            trace=args.trace is not None,
            hash_algorithm=args.hash or DEFAULT_HASH,
        )
    except (OverlayError, ValueError) as exc:
        return Failed(ExitCode.USAGE, str(exc))
    if args.max_paths is not None and args.max_paths < 1:
        return Failed(ExitCode.USAGE, "--max-paths must be at least 1")
    if args.max_paths is not None and args.max_paths > 1 and args.path is not None:
        return Failed(ExitCode.USAGE, "--max-paths: a pinned --path is one chain; leave out --path to use several")
    if args.to not in overlay.depots:
        return Failed(ExitCode.USAGE, f"--to {args.to}: no such depot in {overlay.source} "
                      f"(known: {', '.join(overlay.depots)})")
    if (args.file is None) == (not args.source):
        return Failed(ExitCode.USAGE, "give the FILE to send, or its replicas with --source URL (not both)")
    if args.file is not None and not args.file.is_file() and not args.file.is_dir():
        return Failed(ExitCode.USAGE, f"{args.file}: not a readable file or directory")
    bad = [url for url in args.source if not replica_options.is_url(url)]
    if bad:
        scheme = bad[0].partition(":")[0][:16]  # only that: the rest may hold a capability
        return Failed(ExitCode.USAGE, f"--source {scheme}:…: not an http(s) URL")
    if len(set(args.source)) != len(args.source):
        return Failed(ExitCode.USAGE, "--source: a URL is given twice")
    try:
        plan = args.replica.plan_config(timeout)
    except ValueError as exc:
        return Failed(ExitCode.USAGE, str(exc))
    pinned: list[str] | None = None
    if args.path is not None:
        names = [name.strip() for name in args.path.split(",") if name.strip()]
        unknown = [name for name in names if name not in overlay.depots]
        if unknown:
            return Failed(ExitCode.USAGE, f"--path: unknown depot(s) {', '.join(unknown)}")
        if not names or names[-1] != args.to:
            names.append(args.to)
        if len(set(names)) != len(names):
            return Failed(ExitCode.USAGE, "--path: a depot may appear only once")
        pinned = [overlay.here, *names]
    return overlay, relay_config, pinned, plan


Sent = tuple[RelayResult, PathScheduler | None, list[str]]


class _Send:
    """One ``lnet-send`` run once its arguments are checked: a file or a tree, with its journal open."""

    def __init__(
        self, args: SendArgs, argv: list[str], io: ClientIO, out: CommandOutput, overlay: Overlay,
        relay_config: RelayConfig, pinned: list[str] | None, memory: EdgeMemory, memory_path: Path,
    ) -> None:
        self.args, self.argv, self.io, self.out = args, argv, io, out
        self.overlay, self.relay_config, self.pinned = overlay, relay_config, pinned
        self.memory, self.memory_path = memory, memory_path
        # Follows the depot directory during the transfer (depots joining and leaving), when one is used
        self.membership: Callable[[Relay], Awaitable[None]] | None = None

    async def with_journal(self, manifest_path: Path, body: Callable[[SendJournal], Awaitable[Outcome]]) -> int:
        """Run ``body`` with the transfer's send journal open (it resumes an interrupted run of this transfer,
        ``lnet.client.sending.resume``) and finish its outcome; a journal that recorded nothing is removed:
        nothing to resume."""
        try:
            journal = SendJournal.open(journal_path(manifest_path), restart=self.args.restart)
        except ResumeRefused as exc:
            return finish(self.out, Failed(ExitCode.USAGE, str(exc)), as_json=self.args.json)
        previous = journal.previous
        if self.args.hash is None and previous is not None:  # a resume keeps the interrupted run's hash
            self.relay_config = replace(self.relay_config, hash_algorithm=previous.hash_algorithm)
        try:
            return finish(self.out, await body(journal), as_json=self.args.json)
        finally:
            if not journal.records:
                journal.remove()
            journal.close()

    def options(
        self, journal: SendJournal, on_event: _SendProgress, relay_config: RelayConfig, publish: PublishOptions,
    ) -> SendOptions:
        args = self.args
        return SendOptions(
            self.overlay, args.to, self.pinned, self.memory, warm=not args.cold, relay_config=relay_config,
            scheduler_config=scheduler_config(args), timeout_s=self.relay_config.timeout_s, on_event=on_event,
            longest_duration=args.duration is None, journal=journal, transport=self.io.transport,
            offload=self.io.offload, publish=publish, membership=self.membership,
        )

    def delivered(
        self, sent: Sent, journal: SendJournal, *, file: str, name: str, size: int,
        manifest: Manifest | tree.TreeManifest, manifest_path: Path, progress: _SendProgress,
        fed: MirrorResult | None = None, tree_sent: TreeSent | None = None,
    ) -> Delivered:
        result, scheduler, skipped = sent
        receiver = progress.receiver
        return Delivered(
            result, scheduler, skipped, file=file, name=name, size=size, dest=self.args.to, manifest=manifest,
            manifest_path=manifest_path, journal=journal, memory=self.memory, memory_path=self.memory_path,
            report_path=self.args.report, fed=fed, tree=tree_sent, receive_url=progress.receive_url,
            follow=self.args.follow, drained=receiver.drained if receiver is not None else 0,
        )

    async def relay(
        self, journal: SendJournal, subject: Path | None, progress: _SendProgress, go: Callable[[], Awaitable[Sent]],
    ) -> Sent | Failed:
        """Run the transfer ``go`` under the progress bar; a failure or Ctrl-C becomes its exit code and message
        (with the command that resumes, when blocks are already at the destination)."""
        try:
            with progress.progress:
                return await go()
        except BaseException as exc:  # Ctrl-C comes bare, or in a group from a nursery
            if is_interrupt(exc):
                return Failed(ExitCode.INTERRUPTED, interrupted(journal, self.args.to, self.argv))
            if not isinstance(exc, Exception):
                raise
            mapped = failure_exit(exc, subject)  # anything else is a bug: re-raised
            if mapped is None:
                raise
            code, message = mapped
            note = None
            if journal.records and code != ExitCode.USAGE:
                note = interrupted(journal, self.args.to, self.argv, what="stopped")
            return Failed(code, message, note)
        finally:
            progress.close()  # the trace, complete

    async def send_file(self, journal: SendJournal, name: str, manifest_path: Path, plan: PlanConfig) -> Outcome:
        """One file, or one file from its replicas (``--source``), with its journal open."""
        args, console = self.args, self.out.err
        relay_config = self.relay_config
        dest_url = self.overlay.depots[args.to].url
        if args.file is not None:
            try:
                journal.begin(file_header(args.file, dest_url, relay_config))
            except ResumeRefused as exc:
                return Failed(ExitCode.USAGE, str(exc))
        size = args.file.stat().st_size if args.file is not None else 0
        show = not args.no_progress and not args.json and console.is_terminal
        progress = _SendProgress(console, size, show=show, lines=not args.json, trace=args.trace, name=name,
                                 blocks=-(-size // relay_config.block_size))

        manifest_of = _once(lambda result: build_manifest(Path(name), dest_url, result, relay_config,
                                                          final_path(result)))

        publish = PublishOptions(name, "file", args.follow, manifest_of=lambda result: manifest_of(result).to_dict())
        options = self.options(journal, progress, relay_config, publish)
        fed: MirrorResult | None = None
        # --source: the spool outlives an interrupted run (the download resumes from it); named after the journal
        spool = Path(args.spool or tempfile.gettempdir()) / (
            "lnet-send-" + hashlib.sha256(str(journal.path.resolve()).encode()).hexdigest()[:16])

        def sized(total: int) -> None:
            nonlocal size
            size = total
            progress.blocks = -(-total // relay_config.block_size)
            progress.progress.update(progress.task, total=total)
            journal.begin(source_header(args.source, name, total, dest_url, relay_config))

        async def go() -> Sent:
            nonlocal fed
            if args.file is not None:
                return await options.send(args.file)
            if args.restart:
                shutil.rmtree(spool, ignore_errors=True)
            spool.mkdir(mode=0o700, parents=True, exist_ok=True)
            replicas = ReplicaOptions(plan, relay_config.timeout_s, args.replica.sha256,
                                      not args.replica.ignore_validators, args.replica.history_file())
            result, scheduler, skipped, fed = await send_from_replicas(
                args.source, spool / name, replicas=replicas, on_size=sized, options=options, connect=self.io.connect)
            return result, scheduler, skipped

        sent = await self.relay(journal, args.file, progress, go)
        if isinstance(sent, Failed):
            return sent
        if args.source:
            shutil.rmtree(spool, ignore_errors=True)
        return self.delivered(sent, journal, file=str(args.file or name), name=name, size=size,
                              manifest=manifest_of(sent[0]), manifest_path=manifest_path, progress=progress, fed=fed)

    async def send_tree(self, journal: SendJournal, name: str, manifest_path: Path) -> Outcome:
        """``lnet-send DIR``, with its journal open: walk, plan, pack, send the stream, and the tree manifest."""
        args, overlay, memory, relay_config = self.args, self.overlay, self.memory, self.relay_config
        assert args.file is not None
        root: Path = args.file
        try:
            entries = tree.walk(root)
            fixed = args.pipeline_depth
            if fixed is not None and fixed < 1:
                raise ValueError("--pipeline-depth must be at least 1")
            bdp_given = parse_size(args.bdp) if args.bdp is not None else None
        except (OSError, ValueError) as exc:
            return Failed(ExitCode.USAGE, str(exc))
        patterns = list(args.priority)
        files = [
            smallfiles.FileItem(i, e.size, is_priority(e.path, patterns))
            for i, e in enumerate(entries) if e.type == "file"
        ]
        first_hop = self.pinned[1] if self.pinned is not None else args.to
        previous = journal.previous
        if bdp_given is None and previous is not None and previous.kind == "tree" and previous.bdp > 0:
            bdp_given = previous.bdp  # a resume plans for the same BDP, so that the blocks come out the same
        if bdp_given is None:
            try:
                hop = overlay.depots[first_hop]
                rtt = await round_trip(hop.url, relay_config.timeout_s, hop.token, transport=self.io.transport)
            except Exception as exc:  # noqa: BLE001 - the depot check in send() says it better
                return Failed(ExitCode.UNREACHABLE, f"{first_hop} does not answer: {innermost(exc)}")
            rate = memory.estimate(overlay.here, first_hop) or ASSUMED_RATE_BPS
            bdp = max(1, round(rate * rtt))
        else:
            bdp, rtt, rate = max(1, bdp_given), 0.0, 0.0
        limits = smallfiles.PlannerLimits(
            block_size=relay_config.block_size, min_depth=relay_config.min_inflight,
            max_depth=relay_config.max_inflight,
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
            journal.begin(tree_header(root, entries, packed.stream, packed.block_pieces(),
                                      overlay.depots[args.to].url, config, bdp))
        except ResumeRefused as exc:
            return Failed(ExitCode.USAGE, str(exc))
        arrivals = FileArrivals(entries, list(plan.blocks))
        size = packed.stream.size
        console = self.out.err
        show = not args.no_progress and not args.json and console.is_terminal
        progress = _SendProgress(console, size, show=show, lines=not args.json, arrivals=arrivals,
                                 trace=args.trace, name=name, blocks=len(plan.blocks))
        pieces = packed.block_pieces()

        def tree_manifest(result: RelayResult) -> tree.TreeManifest:
            stream = build_manifest(Path(name), overlay.depots[args.to].url, result, config, final_path(result))
            return tree.TreeManifest(
                name=name, created=time.time(), entries=tuple(entries),
                blocks=tuple(tuple(tree.TreePiece(**p) for p in block) for block in pieces), stream=stream,
            )

        manifest_of = _once(tree_manifest)

        shape = {"entries": [entry.to_dict() for entry in entries], "blocks": [list(block) for block in pieces]}
        publish = PublishOptions(name, "tree", args.follow, tree=shape if args.follow else None,
                                 manifest_of=lambda result: manifest_of(result).to_dict())
        options = self.options(journal, progress, config, publish)
        sent = await self.relay(journal, root, progress, lambda: options.send(packed.stream))
        if isinstance(sent, Failed):
            return sent
        result = sent[0]
        manifest = manifest_of(result)
        tree_sent = TreeSent(
            files=arrivals.total_files, entries=len(entries), blocks=len(plan.blocks), depth=plan.depth,
            fixed=plan.fixed,
            plan={
                "bdp": plan.bdp, "rtt_s": rtt, "rate_bps": rate, "pp": plan.pp, "new_pp": plan.new_pp,
                "times": plan.times, "big_files": plan.n_big, "transfer": plan.transfer, "depth": plan.depth,
                "fixed": plan.fixed, "batches": len(plan.batches), "blocks": len(plan.blocks),
                "mean_block": mean_block,
            },
            arrivals=[
                {"path": entries[key].path, "t": round(t, 4), "priority": is_priority(entries[key].path, patterns)}
                for key, t in arrivals.arrived
            ],
        )
        return self.delivered(sent, journal, file=str(root), name=name, size=size, manifest=manifest,
                              manifest_path=manifest_path, progress=progress, tree_sent=tree_sent)
