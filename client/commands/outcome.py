"""What a command ends with, and the one place it is shown: ``finish`` turns an outcome into the follow-ups (the
manifest, the edge memory, the report), the output (a summary, or the ``--json`` document) and the exit code.

The outcomes: ``Delivered`` (``lnet-send``: a file, a file from its replicas, or a tree, with ``TreeSent``),
``Fetched`` (``lnet-get MANIFEST``, or a publication's URL, ``--follow`` or not), ``TreeFetched`` (``lnet-get``
of a tree manifest), ``ReplicasFetched``
(``lnet-get URL ...``) and ``Failed`` (any command: its exit code, message and an optional note after it).
lnet-send's summary goes to stderr (its stdout is the ``--json`` object only); lnet-get's to stdout.

Loaded after parsing; the libraries it uses for the follow-ups are imported where they are needed, so that
``lnet-get`` does not load the relay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lnet.client.commands.output import CommandOutput
from lnet.client.exits import ExitCode
from lnet.units import format_size

if TYPE_CHECKING:
    from lnet.client.fetching.blocks import GetResult
    from lnet.client.fetching.mirrors import MirrorResult
    from lnet.client.formats.manifest import Manifest
    from lnet.client.formats.tree import TreeManifest
    from lnet.client.sending.relay import RelayResult
    from lnet.client.sending.resume import SendJournal
    from lnet.scheduler import EdgeMemory, PathScheduler

__all__ = [
    "Delivered",
    "Failed",
    "Fetched",
    "Outcome",
    "ReplicasFetched",
    "TreeFetched",
    "TreeSent",
    "finish",
]


@dataclass(frozen=True)
class Failed:
    """A command that did not do what it was asked: ``code`` and ``message`` (``CommandOutput.fail``), then
    ``note`` on a line of its own when there is something more to say (how to resume)."""

    code: ExitCode
    message: str
    note: str | None = None


@dataclass(frozen=True)
class TreeSent:
    """What ``lnet-send DIR`` adds to a delivery: the tree's counts, the small-file plan, and when each file
    arrived (``arrivals``: path, seconds from the start, whether it matched ``--priority``)."""

    files: int
    entries: int
    blocks: int
    depth: int
    fixed: bool
    plan: dict[str, Any]
    arrivals: list[dict[str, Any]]


@dataclass(frozen=True)
class Delivered:
    """``lnet-send``: everything is at the destination ``dest``. ``file`` is what was sent as the summary names
    it, ``name`` the manifest's (what ``lnet-get ... -o`` is told); ``fed``: the replicas a ``--source`` file
    came from; ``tree``: set for a tree."""

    result: RelayResult
    scheduler: PathScheduler | None
    skipped: list[str]
    file: str
    name: str
    size: int
    dest: str
    manifest: Manifest | TreeManifest
    manifest_path: Path
    journal: SendJournal
    memory: EdgeMemory
    memory_path: Path
    report_path: Path | None
    fed: MirrorResult | None = None
    tree: TreeSent | None = None
    receive_url: str | None = None
    """The publication's URL, for the receiver (``lnet-get URL``)."""
    follow: bool = False
    drained: int = 0
    """``--follow``: the blocks the receiver had drained when the sender ended."""


@dataclass(frozen=True)
class Fetched:
    """``lnet-get MANIFEST``: the file verified and in place (``follow``: received as lnet-send --follow sent it,
    ``lnet-get URL --follow``)."""

    result: GetResult
    follow: bool = False


@dataclass(frozen=True)
class TreeFetched:
    """``lnet-get`` of a tree manifest: the tree rebuilt under ``output``."""

    result: GetResult
    output: Path
    files: int
    entries: int
    size: int
    follow: bool = False


@dataclass(frozen=True)
class ReplicasFetched:
    """``lnet-get URL ...``: the file from its replicas, with what each gave."""

    result: MirrorResult


Outcome = Delivered | Fetched | TreeFetched | ReplicasFetched | Failed


def finish(out: CommandOutput, outcome: Outcome, *, as_json: bool) -> int:
    """The follow-ups, output and exit code of ``outcome`` (``as_json``: the command's ``--json``)."""
    if isinstance(outcome, Failed):
        code = out.fail(outcome.code, outcome.message)
        if outcome.note is not None:
            out.note(outcome.note)
        return code
    if isinstance(outcome, Delivered):
        _delivered(out, outcome, as_json)
    elif isinstance(outcome, Fetched):
        _fetched(outcome, as_json)
    elif isinstance(outcome, TreeFetched):
        _tree_fetched(outcome, as_json)
    else:
        _replicas_fetched(outcome, as_json)
    return int(ExitCode.OK)


def _delivered(out: CommandOutput, sent: Delivered, as_json: bool) -> None:
    """The manifest written and the journal gone (nothing left to resume), the edge memory saved for the next
    warm start, ``--report``; then the summary."""
    from lnet.client.sending.send import final_path, over_text, save_report, summary

    sent.manifest.save(sent.manifest_path)
    sent.journal.remove()
    try:
        sent.memory.save(sent.memory_path)
    except OSError as exc:
        out.note(f"could not save the edge memory to {sent.memory_path}: {exc}")
    report = summary(sent.result, sent.scheduler, sent.size)
    if sent.report_path is not None:
        save_report(sent.report_path, sent.name, sent.size, report)
    result, resumed, tree = sent.result, len(sent.journal.resumed), sent.tree
    common = {"file": sent.file, "manifest": str(sent.manifest_path), "receive_url": sent.receive_url,
              "follow": sent.follow, "drained_blocks": sent.drained}
    if as_json and tree is None:
        sources = {"sources": sent.fed.to_dict()["replicas"]} if sent.fed is not None else {}
        print(json.dumps({**report, **common, "file_hash": result.file_hash, "path": final_path(result),
                          "skipped_depots": sent.skipped, "resumed_blocks": resumed, **sources}))
        return
    if as_json and tree is not None:
        print(json.dumps({**report, **common, "path": final_path(result), "skipped_depots": sent.skipped,
                          "resumed_blocks": resumed, "files": tree.files, "entries": tree.entries,
                          "plan": tree.plan, "arrivals": tree.arrivals}))
        return
    console = out.err
    rate = f"in {result.seconds:.1f} s ({report['mbps']:.1f} Mbit/s) over {over_text(result)}"
    if tree is None:
        console.print(
            f"sent {format_size(sent.size)} {rate}; {result.resends} block re-sends"
            + (f"; {result.second_copies_won} of {result.second_copies} second copies at the end arrived first"
               if result.second_copies else "")
            + (f"; {resumed} blocks were already at {sent.dest} (resumed)" if resumed else "")
        )
        if sent.fed is not None:
            used = sum(1 for r in sent.fed.replicas if r.bytes)
            console.print(f"fed from {used} of {len(sent.fed.replicas)} replicas: " + ", ".join(
                f"{r.url} {r.share:.0%}" for r in sent.fed.replicas))
    else:
        console.print(
            f"sent {tree.files} files ({tree.entries} entries, {format_size(sent.size)}) {rate}; "
            f"{tree.blocks} blocks, pipelining depth {tree.depth}{' (fixed)' if tree.fixed else ''}, "
            f"{result.resends} block re-sends"
        )
    if sent.follow:
        console.print(f"the receiver has drained {sent.drained} of {len(result.blocks)} blocks; the rest wait for it "
                      f"at {sent.dest} (the URL printed at the start)")
    console.print(f"manifest: {sent.manifest_path} (fetch with: lnet-get {sent.manifest_path} -o {sent.name})")


def _fetched(fetched: Fetched, as_json: bool) -> None:
    result = fetched.result
    if as_json:
        print(json.dumps({**result.to_dict(), **({"follow": True} if fetched.follow else {})}))
        return
    resumed = f", {result.resumed_blocks} resumed" if result.resumed_blocks else ""
    followed = ", received as it was sent" if fetched.follow else ""
    print(
        f"{result.path}: {format_size(result.size)} verified, {result.blocks} blocks{resumed}, "
        f"{format_size(result.fetched_bytes)} fetched in {result.seconds:.2f} s ({result.mbps:.1f} Mbit/s)"
        f"{followed}"
    )
    if len(result.depots) > 1:  # the blocks sat on several depots: what each gave
        for source in result.to_dict()["sources"]:
            print(f"  {source['depot']}: {format_size(source['bytes'])} ({source['share']:.0%}), "
                  f"{source['blocks']} blocks, {source['mbps']:.1f} Mbit/s")


def _tree_fetched(fetched: TreeFetched, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**fetched.result.to_dict(), "files": fetched.files, "entries": fetched.entries,
                          **({"follow": True} if fetched.follow else {})}))
        return
    followed = ", received as it was sent" if fetched.follow else ""
    print(f"{fetched.output}: {fetched.files} files ({fetched.entries} entries, {format_size(fetched.size)}) "
          f"verified and in place in {fetched.result.seconds:.2f} s{followed}")


def _replicas_fetched(fetched: ReplicasFetched, as_json: bool) -> None:
    result = fetched.result
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result.path}: per replica", title_justify="left")
    for column in ("replica", "bytes", "share", "requests", "chunks (min / median / max)", "Mbit/s", "state"):
        table.add_column(column, justify="left" if column in ("replica", "state") else "right")
    for report in result.replicas:
        d = report.to_dict()
        chunks = (f"{format_size(d['chunk_min'])} / {format_size(d['chunk_median'])} / {format_size(d['chunk_max'])}"
                  if report.chunks else "-")
        state = report.state if not report.reason or report.state == "ok" else f"{report.state}: {report.reason}"
        table.add_row(report.url, format_size(report.bytes), f"{report.share:.1%}", str(report.requests), chunks,
                      f"{report.mbps:.1f}", state)
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    resumed = f", {format_size(result.resumed_bytes)} resumed" if result.resumed_bytes else ""
    console.print(f"{result.path}: {format_size(result.size)} in {result.seconds:.2f} s ({result.mbps:.1f} Mbit/s) "
                  f"from {sum(1 for r in result.replicas if r.bytes)} replicas{resumed}, sha256 {result.sha256}",
                  markup=False)
