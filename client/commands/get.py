"""``lnet-get``: a file lnet delivered (``MANIFEST``), a directory tree (a tree manifest), or one file from several
HTTP replicas at once (``URL ...``), written to ``OUT.lnet-part`` and renamed into place; run again to resume.

Parses its arguments, calls ``lnet.client.fetching`` (``get_file``, ``get_directory``, ``fetch_mirrors``) with
typed options, and turns the outcome into output and an exit code. Only argparse and the exit codes are loaded
before parsing; the libraries, trio and rich are loaded in ``main`` after it (``--help`` answers at once).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from lnet.client.commands import replica_options
from lnet.client.commands.output import CommandOutput, parse_arguments, transfer_progress
from lnet.client.exits import EXIT_CODES_HELP, ExitCode, Failure, is_interrupt
from lnet.units import format_size, parse_duration

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from lnet.client.fetching.blocks import GetResult
    from lnet.client.fetching.mirrors import MirrorResult

__all__ = ["DEFAULT_PARALLEL", "DEFAULT_TIMEOUT_S", "MAX_PARALLEL", "main"]

R = TypeVar("R")

DEFAULT_PARALLEL = 8
DEFAULT_TIMEOUT_S = 30.0
MAX_PARALLEL = 256


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lnet-get",
        description="Fetch a file lnet delivered (MANIFEST: every block from its depot, each hash and the whole "
        "file's checked), or one file from several HTTP replicas at once (URL ...: byte ranges from all of them, "
        "sized so that all finish together). Written to OUT.lnet-part and renamed into place; run it again to "
        "resume.",
        epilog=replica_options.EPILOG + "\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources", nargs="+", metavar="MANIFEST | URL",
        help="the manifest lnet-send wrote, or the URLs of replicas of one file (servers that honour Range)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="where to put the file")
    p.add_argument(
        "--parallel", type=_parallel, default=DEFAULT_PARALLEL, metavar="N",
        help=f"blocks fetched at once (default {DEFAULT_PARALLEL})",
    )
    p.add_argument(
        "--timeout", type=_timeout, default=DEFAULT_TIMEOUT_S, metavar="TIME",
        help=f"bound on every network wait, e.g. 30s (default {DEFAULT_TIMEOUT_S:g}s)",
    )
    p.add_argument(
        "--depots", type=Path, metavar="FILE",
        help="a depots file whose operator tokens go to the depots that require theirs for reads (default: "
        "$LNET_DEPOTS or the user's depots file, if there is one)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with the outcome at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)")
    replica_options.add_arguments(p)
    return p


def _parallel(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_PARALLEL}")
    return value


def _timeout(text: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(_parser(), argv)
    if isinstance(args, int):
        return args
    out = CommandOutput("lnet-get", json_failures=args.json, path=args.output)
    if all(replica_options.is_url(source) for source in args.sources):
        return _from_replicas(args, out)
    if len(args.sources) > 1:
        return out.fail(ExitCode.USAGE, "give one manifest, or the URLs of one or more replicas")
    return _from_depots(args, out, Path(args.sources[0]))


def _run(out: CommandOutput, progress: Progress, fetch: Callable[[], Awaitable[R]], kept: str) -> R | int:
    """Run a download under its progress bar: its result, or the exit code of its failure or of Ctrl-C (``kept``
    says what is kept for a resume)."""
    import trio

    try:
        with progress:
            return trio.run(fetch)
    except Failure as exc:
        return out.fail(exc.exit_code, str(exc))
    except BaseException as exc:
        if not is_interrupt(exc):
            raise
        return out.fail(ExitCode.INTERRUPTED, f"interrupted; {kept}")


def _from_depots(args: argparse.Namespace, out: CommandOutput, path: Path) -> int:
    """A manifest's file, or a tree manifest's tree, from the depots that hold its blocks."""

    from lnet.client.fetching.blocks import depot_tokens, get_file
    from lnet.client.fetching.partfile import part_path
    from lnet.client.fetching.tree import get_directory
    from lnet.client.formats import tree
    from lnet.client.formats.manifest import ManifestError
    from lnet.client.formats.manifest import load as load_manifest
    from lnet.client.formats.overlay import OverlayError

    is_tree = tree.is_tree_document(path)
    try:
        manifest = tree.load(path) if is_tree else load_manifest(path)
    except ManifestError as exc:
        return out.fail(ExitCode.USAGE, f"invalid manifest: {exc}")
    try:
        tokens = depot_tokens(args.depots)
    except OverlayError as exc:
        return out.fail(ExitCode.USAGE, str(exc))
    progress = transfer_progress(out.err, enabled=out.show_progress(args.no_progress))
    task = progress.add_task(manifest.name, total=manifest.size)

    def on_progress(nbytes: int) -> None:
        progress.advance(task, nbytes)

    async def fetch() -> GetResult:
        if isinstance(manifest, tree.TreeManifest):
            return await get_directory(manifest, args.output, parallel=args.parallel, timeout_s=args.timeout,
                                       on_progress=on_progress, tokens=tokens)
        return await get_file(manifest, args.output, parallel=args.parallel, timeout_s=args.timeout,
                              on_progress=on_progress, tokens=tokens)

    kept = "run the same command to resume" if is_tree else (
        f"the verified blocks are kept in {part_path(args.output)}: run the same command to resume")
    result = _run(out, progress, fetch, kept)
    if isinstance(result, int):
        return result
    if isinstance(manifest, tree.TreeManifest):
        files = len(manifest.files())
        if args.json:
            print(json.dumps({**result.to_dict(), "files": files, "entries": len(manifest.entries)}))
        else:
            print(f"{args.output}: {files} files ({len(manifest.entries)} entries, {format_size(manifest.size)}) "
                  f"verified and in place in {result.seconds:.2f} s")
        return int(ExitCode.OK)
    if args.json:
        print(json.dumps(result.to_dict()))
        return int(ExitCode.OK)
    resumed = f", {result.resumed_blocks} resumed" if result.resumed_blocks else ""
    print(
        f"{result.path}: {format_size(result.size)} verified, {result.blocks} blocks{resumed}, "
        f"{format_size(result.fetched_bytes)} fetched in {result.seconds:.2f} s ({result.mbps:.1f} Mbit/s)"
    )
    if len(result.depots) > 1:  # the blocks sat on several depots: what each gave
        for source in result.to_dict()["sources"]:
            print(f"  {source['depot']}: {format_size(source['bytes'])} ({source['share']:.0%}), "
                  f"{source['blocks']} blocks, {source['mbps']:.1f} Mbit/s")
    return int(ExitCode.OK)


def _from_replicas(args: argparse.Namespace, out: CommandOutput) -> int:
    """``lnet-get URL ...``: one file from several HTTP replicas at once."""
    if args.sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", args.sha256):
        return out.fail(ExitCode.USAGE, f"--sha256 wants 64 hex digits, not {args.sha256!r}")
    try:
        config = replica_options.plan_config(args, args.timeout)
    except ValueError as exc:
        return out.fail(ExitCode.USAGE, str(exc))
    if args.output.is_dir():
        return out.fail(ExitCode.USAGE, f"{args.output} is a directory: give the file's path")
    from rich.console import Console
    from rich.table import Table

    from lnet.client.fetching.mirrors import fetch_mirrors
    from lnet.client.fetching.partfile import part_path
    from lnet.client.wire.range_connection import parse_url

    for url in args.sources:
        try:
            parse_url(url)
        except ValueError as exc:
            return out.fail(ExitCode.USAGE, str(exc))
    progress = transfer_progress(out.err, enabled=out.show_progress(args.no_progress))
    tasks: dict[int, TaskID] = {}

    def on_start(size: int, shown: list[str]) -> None:
        tasks[-1] = progress.add_task(args.output.name, total=size)
        for i, url in enumerate(shown):
            tasks[i] = progress.add_task(f"  {url.split('://', 1)[-1].split('/', 1)[0]}", total=None)

    def on_progress(replica: int, nbytes: int) -> None:
        progress.advance(tasks[-1], nbytes)
        progress.advance(tasks[replica], nbytes)

    history = args.history if args.history is not None else replica_options.history_path()

    async def fetch() -> MirrorResult:
        return await fetch_mirrors(
            args.sources, args.output, config=config, timeout_s=args.timeout, sha256=args.sha256,
            check_validators=not args.ignore_validators, history=history, on_start=on_start,
            on_progress=on_progress)

    result = _run(out, progress, fetch, f"what arrived is kept in {part_path(args.output)}: run the same "
                  "command to resume")
    if isinstance(result, int):
        return result
    if args.json:
        print(json.dumps(result.to_dict()))
        return int(ExitCode.OK)
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
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
