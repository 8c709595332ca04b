"""``lnet-get``: a file lnet delivered (``MANIFEST``, or the publication URL ``lnet-send`` printed), a directory
tree (a tree manifest), a transfer still being sent (``URL --follow``), or one file from several HTTP replicas at
once (``URL ...``), written to ``OUT.lnet-part`` and renamed into place; run again to resume.

A single depot data URL (``http://HOST:PORT/v1/data/CAP``) is told apart by its first bytes: a publication
(``formats.published``) is fetched as its manifest says, or followed with ``--follow``; anything else is a
replica like any other URL.

Parses its arguments once into ``GetArgs``, calls ``lnet.client.fetching`` (``get_file``, ``get_directory``,
``follow``, ``fetch_mirrors``) with them and the command's ``ClientIO`` (how it reaches the network), and hands
the outcome to ``commands.outcome.finish`` (output and exit code). Only argparse and the exit codes are loaded
before parsing; the libraries, trio and rich are loaded after it (``--help`` answers at once). With URLs, the
replicas are dialled (by ``get_entry``, the command's entry point, before this module is even loaded) and asked
for their first ranges (``wire.predial``) before trio is loaded, so that all travels while it loads; not for a
single depot data URL (most likely a publication, on which a replica's first range would be wasted) nor with
``--follow``. ``run`` is ``main`` for a caller already in a trio loop.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from lnet.client.commands import replica_options
from lnet.client.commands.clientio import ClientIO
from lnet.client.commands.outcome import Failed, Outcome, finish
from lnet.client.commands.output import CommandOutput, QuietProgress, file_option_problem, parse_arguments
from lnet.client.commands.replica_options import ReplicaArgs
from lnet.client.exits import EXIT_CODES_HELP, ExitCode, Failure, is_interrupt, run_interruptible
from lnet.units import parse_duration

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from lnet.client.fetching.blocks import GetResult
    from lnet.client.fetching.mirrors import MirrorResult
    from lnet.client.formats.manifest import Manifest
    from lnet.client.formats.tree import TreeManifest
    from lnet.client.wire.depot_client import DepotClient
    from lnet.client.wire.predial import Predial

__all__ = ["DEFAULT_PARALLEL", "DEFAULT_TIMEOUT_S", "MAX_PARALLEL", "GetArgs", "main", "run"]

R = TypeVar("R")

DEFAULT_PARALLEL = 8
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_WAIT_S = 600.0
MAX_PARALLEL = 256
PREFIX_BYTES = 100
"""The bytes read from a depot data URL to tell a publication from any other file."""
_DEPOT_DATA_PATH = re.compile(r"/v1/data/[A-Za-z0-9_-]{22,128}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lnet-get",
        description="Fetch a file lnet delivered (MANIFEST, or the URL lnet-send printed: every block from its "
        "depot, each hash and the whole file's checked), receive one lnet-send --follow is still sending (URL "
        "--follow), or fetch one file from several HTTP replicas at once (URL ...: byte ranges from all of them, "
        "sized so that all finish together). Written to OUT.lnet-part and renamed into place; run it again to "
        "resume.",
        epilog=replica_options.EPILOG + "\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources", nargs="+", metavar="MANIFEST | URL",
        help="the manifest lnet-send wrote, the URL it printed, or the URLs of replicas of one file (servers "
        "that honour Range)",
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
    p.add_argument(
        "--directory", metavar="URL",
        help="the one source is the NAME of a dataset published in this depot directory (lnet publish): fetch it "
        "from the sources recorded there",
    )
    p.add_argument(
        "--follow", action="store_true",
        help="receive a transfer that lnet-send --follow is still sending (give the URL it printed): writes each "
        "block as it lands, frees it at the depot, ends when the whole file is verified",
    )
    p.add_argument(
        "--wait", type=_timeout, default=DEFAULT_WAIT_S, metavar="TIME",
        help="--follow: how long to wait for the sender when it makes no progress before giving up (exit 3; the "
        f"same command resumes), e.g. 30m (default {DEFAULT_WAIT_S / 60:g}m)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with the outcome at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)")
    replica_options.add_arguments(p)
    p.add_argument(
        "--trace", type=Path, metavar="FILE",
        help="URL mode: write every range request, once it is over, to FILE, one JSON object a line (replica, "
        "range, when it was sent, its first and last byte, how it ended): where a download's time went",
    )
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


@dataclass(frozen=True)
class GetArgs:
    """``lnet-get``'s options, parsed (fields named as the flags)."""

    sources: tuple[str, ...]
    output: Path
    parallel: int
    timeout: float
    depots: Path | None
    json: bool
    no_progress: bool
    replica: ReplicaArgs
    trace: Path | None = None
    follow: bool = False
    wait: float = DEFAULT_WAIT_S
    directory: str | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> GetArgs:
        return cls(tuple(ns.sources), ns.output, ns.parallel, ns.timeout, ns.depots, ns.json, ns.no_progress,
                   ReplicaArgs.from_namespace(ns), ns.trace, ns.follow, ns.wait, ns.directory)

    @property
    def dataset_name(self) -> bool:
        """One source that is neither a URL nor a file, with a directory named: a dataset (``lnet publish``)."""
        return (self.directory is not None and len(self.sources) == 1
                and not replica_options.is_url(self.sources[0]) and not Path(self.sources[0]).exists())

    @property
    def one_depot_url(self) -> bool:
        """A single depot data URL: perhaps a publication (``lnet-send`` printed it), told by its first bytes."""
        return len(self.sources) == 1 and is_depot_data_url(self.sources[0])


def is_depot_data_url(url: str) -> bool:
    """Whether ``url`` has the shape of a depot's data URL, ``http(s)://HOST:PORT/v1/data/CAP`` (the standard
    library only: ``main`` asks before trio is loaded)."""
    from urllib.parse import urlsplit

    if not replica_options.is_url(url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return _DEPOT_DATA_PATH.fullmatch(parts.path) is not None and not parts.query and not parts.fragment


def main(argv: list[str] | None = None, *, io: ClientIO | None = None, predial: Predial | None = None) -> int:
    """``lnet-get``: its exit code. ``io``: how it reaches depots and replicas (None: the network); ``predial``:
    connections ``commands.get_entry`` dialled to the command line's URLs before the arguments were parsed
    (closed here, whatever happens)."""
    try:
        parsed = _parse(argv)
        if isinstance(parsed, int):
            return parsed
        args, out = parsed
        if io is None and all(replica_options.is_url(source) for source in args.sources):
            # A publication is no replica: asking it for a replica's first range would be wasted.
            skip = args.follow or args.one_depot_url
            predial = predial if skip else _predial(args, predial)
            io = ClientIO(early=predial)
        try:
            return run_interruptible(_get, args, out, io or ClientIO())
        except BaseException as exc:  # Ctrl-C before or after the download (during it, _fetch says what is kept)
            if not is_interrupt(exc):
                raise
            return finish(out, Failed(ExitCode.INTERRUPTED, "interrupted; run the same command to resume"),
                          as_json=args.json)
    finally:
        if predial is not None:
            predial.close()


def _predial(args: GetArgs, predial: Predial | None) -> Predial:
    """Dial the replicas (unless ``predial`` has) and, for a download that is not a resumed one, ask each for its
    first range at once: the handshakes and the first answers travel while trio and the download stack load."""
    from lnet.client.engines.chunks import first_ranges
    from lnet.client.fetching.part_names import state_path
    from lnet.client.wire.predial import Predial

    if predial is None:
        predial = Predial.dial(args.sources, args.timeout)
    try:
        config = args.replica.plan_config(args.timeout)
    except ValueError:
        return predial  # the download reports it; nothing is asked for
    if not state_path(args.output).exists() and len(set(args.sources)) == len(args.sources):
        predial.ask(args.sources, first_ranges(config, len(args.sources)))
    return predial


async def run(argv: list[str], *, io: ClientIO | None = None) -> int:
    """``main`` in a running trio loop (the caller's: tests run a whole command on an emulated network)."""
    parsed = _parse(argv)
    return parsed if isinstance(parsed, int) else await _get(*parsed, io or ClientIO())


def _parse(argv: list[str] | None) -> tuple[GetArgs, CommandOutput] | int:
    """The options and the command's output (its failures go to ``--json`` too), or argparse's exit code."""
    args = parse_arguments(_parser(), argv, GetArgs.from_namespace)
    if isinstance(args, int):
        return args
    return args, CommandOutput("lnet-get", json_failures=args.json, path=args.output)


async def _get(args: GetArgs, out: CommandOutput, io: ClientIO) -> int:
    if args.dataset_name:  # its sources from the depot directory, then as if they were given
        from lnet.client.commands.datasets import resolve_dataset

        found = await resolve_dataset(args.sources[0], args.directory, args.depots, args.timeout)
        if isinstance(found, Failed):
            return finish(out, found, as_json=args.json)
        replica = args.replica
        if found.sha256 is not None and replica.sha256 is None:
            replica = replace(replica, sha256=found.sha256)
        args = replace(args, sources=found.sources, replica=replica, directory=None)
    if args.one_depot_url:
        outcome = await _from_depot_url(args, out, io)
    elif args.follow:
        outcome = Failed(ExitCode.USAGE, "--follow takes the one URL lnet-send --follow printed")
    elif all(replica_options.is_url(source) for source in args.sources):
        outcome = await _from_replicas(args, out, io)
    elif len(args.sources) > 1:
        outcome = Failed(ExitCode.USAGE, "give one manifest, or the URLs of one or more replicas")
    elif args.trace is not None:
        outcome = Failed(ExitCode.USAGE, "--trace records the requests to replicas: give their URLs, not a manifest")
    else:
        outcome = await _from_depots(args, out, io, Path(args.sources[0]))
    return finish(out, outcome, as_json=args.json)


async def _fetch(progress: Progress | QuietProgress, fetch: Callable[[], Awaitable[R]], kept: str) -> R | Failed:
    """Run a download under its progress bar: its result, or the failure it ended with, Ctrl-C included
    (``kept`` says what is kept for a resume)."""
    try:
        with progress:
            return await fetch()
    except Failure as exc:
        return Failed(exc.exit_code, str(exc))
    except BaseException as exc:
        if not is_interrupt(exc):
            raise
        return Failed(ExitCode.INTERRUPTED, f"interrupted; {kept}")


async def _from_depots(args: GetArgs, out: CommandOutput, io: ClientIO, path: Path) -> Outcome:
    """A manifest's file, or a tree manifest's tree, from the depots that hold its blocks."""
    from lnet.client.formats import tree
    from lnet.client.formats.manifest import ManifestError
    from lnet.client.formats.manifest import load as load_manifest

    try:
        manifest = tree.load(path) if tree.is_tree_document(path) else load_manifest(path)
    except ManifestError as exc:
        return Failed(ExitCode.USAGE, f"invalid manifest: {exc}")
    return await _from_manifest(args, out, io, manifest)


async def _from_manifest(args: GetArgs, out: CommandOutput, io: ClientIO, manifest: Manifest | TreeManifest
                         ) -> Outcome:
    """What a manifest (from a file, or a final publication) lists, from the depots that hold its blocks."""
    from lnet.client.commands.outcome import Fetched, TreeFetched
    from lnet.client.fetching.blocks import get_file
    from lnet.client.fetching.partfile import part_path
    from lnet.client.fetching.tree import get_directory
    from lnet.client.formats import tree

    tokens = _tokens(args)
    if isinstance(tokens, Failed):
        return tokens
    is_tree = isinstance(manifest, tree.TreeManifest)
    progress = out.progress(args.no_progress)
    task = progress.add_task(manifest.name, total=manifest.size)

    def on_progress(nbytes: int) -> None:
        progress.advance(task, nbytes)

    async def fetch() -> GetResult:
        if isinstance(manifest, tree.TreeManifest):
            return await get_directory(manifest, args.output, parallel=args.parallel, timeout_s=args.timeout,
                                       on_progress=on_progress, tokens=tokens, transport=io.transport)
        return await get_file(manifest, args.output, parallel=args.parallel, timeout_s=args.timeout,
                              on_progress=on_progress, tokens=tokens, transport=io.transport)

    kept = "run the same command to resume" if is_tree else (
        f"the verified blocks are kept in {part_path(args.output)}: run the same command to resume")
    result = await _fetch(progress, fetch, kept)
    if isinstance(result, Failed):
        return result
    if isinstance(manifest, tree.TreeManifest):
        return TreeFetched(result, args.output, len(manifest.files()), len(manifest.entries), manifest.size)
    return Fetched(result)


def _tokens(args: GetArgs) -> dict[str, str] | Failed:
    """``--depots``' operator tokens by depot base URL (for depots that require theirs for reads)."""
    from lnet.client.fetching.blocks import depot_tokens
    from lnet.client.formats.overlay import OverlayError

    try:
        return depot_tokens(args.depots)
    except OverlayError as exc:
        return Failed(ExitCode.USAGE, str(exc))


async def _from_depot_url(args: GetArgs, out: CommandOutput, io: ClientIO) -> Outcome:
    """One depot data URL: a publication is fetched as its manifest says (or followed, with ``--follow``); any
    other file there is a replica like any URL's."""
    from lnet.client.fetching.follow import data_url, read_publication
    from lnet.client.formats import manifest as file_manifest
    from lnet.client.formats import published, tree
    from lnet.client.wire.depot_client import DepotClient
    from lnet.protocol import redact_capabilities

    url = args.sources[0]
    place = data_url(url)
    tokens = _tokens(args)
    if isinstance(tokens, Failed):
        return tokens
    publication = None
    if place is not None:
        base, capability = place
        by_base = {depot.rstrip("/"): token for depot, token in tokens.items()}
        async with DepotClient(base, token=by_base.get(base), timeout=args.timeout, transport=io.transport) as client:
            try:
                if published.is_publication(await _first_bytes(client, capability)):
                    publication = await read_publication(client, capability, timeout_s=args.timeout)
            except Failure as exc:
                return Failed(exc.exit_code, str(exc))
    if publication is None:
        if args.follow:
            return Failed(ExitCode.USAGE, f"--follow takes the URL lnet-send --follow printed; "
                          f"{redact_capabilities(url)} is not a publication")
        return await _from_replicas(args, out, io)
    if args.trace is not None:
        return Failed(ExitCode.USAGE, "--trace records the requests to replicas; this URL is a publication")
    if args.follow:
        if not publication.follow:
            return Failed(ExitCode.USAGE, "this transfer was not sent with lnet-send --follow: run the same "
                          "command without --follow")
        return await _follow(args, out, io, tokens, publication.name, publication.size, publication.kind == "tree")
    if publication.follow:
        return Failed(ExitCode.USAGE, "this transfer is sent with lnet-send --follow: run the same command with "
                      "--follow to receive it")
    if not publication.final or publication.manifest is None:
        return Failed(ExitCode.USAGE, f"the transfer is still under way ({publication.sender.landed} of "
                      f"{publication.blocks_total} blocks landed): wait for lnet-send to finish, or run it with "
                      "--follow to receive it as it arrives")
    document = publication.manifest
    try:
        manifest = (tree.parse(document) if document.get("format") == tree.FORMAT
                    else file_manifest.parse(document))
    except file_manifest.ManifestError as exc:
        return Failed(ExitCode.USAGE, f"the publication's manifest is invalid: {exc}")
    return await _from_manifest(args, out, io, manifest)


async def _first_bytes(client: DepotClient, capability: str) -> bytes:
    """The first ``PREFIX_BYTES`` of the allocation (fewer when it holds fewer); a ``Failure`` that says what is
    wrong with the URL when there is none to read."""
    from lnet.client.fetching.blocks import GetError
    from lnet.client.fetching.follow import PublicationGone, PublicationUnreachable
    from lnet.client.wire.depot_client import DepotError, DepotUnreachable, NotFound, RangeNotSatisfiable
    from lnet.protocol import redact, redact_capabilities

    shown = f"{client.base_url}/v1/data/{redact(capability)}"
    try:
        return await client.read(capability, 0, PREFIX_BYTES)
    except RangeNotSatisfiable:
        return b""  # empty: no publication
    except NotFound:
        raise PublicationGone(f"{shown}: the depot holds nothing there: the URL is wrong, or what it named "
                              "expired or was freed") from None
    except DepotUnreachable as exc:
        raise PublicationUnreachable(redact_capabilities(str(exc))) from None
    except DepotError as exc:
        raise GetError(f"{shown}: the depot refused: {exc.code}: {exc.message}") from None


async def _follow(args: GetArgs, out: CommandOutput, io: ClientIO, tokens: dict[str, str], name: str, size: int,
                  is_tree: bool) -> Outcome:
    """``lnet-get URL --follow``: the transfer received as lnet-send --follow sends it."""
    from lnet.client.commands.outcome import Fetched, TreeFetched
    from lnet.client.fetching.follow import follow
    from lnet.client.fetching.partfile import part_path

    progress = out.progress(args.no_progress)
    task = progress.add_task(name, total=size)

    def on_progress(nbytes: int) -> None:
        progress.advance(task, nbytes)

    said: list[str] = []

    def on_state(text: str) -> None:
        progress.update(task, description=f"{name} ({text})")
        # Without a bar (a log, a pipe), a line each time the sender's state changes kind, not at every count.
        kind = "".join(c for c in text if not c.isdigit())
        if not out.show_progress(args.no_progress) and not args.json and said[-1:] != [kind]:
            said[:] = [kind]
            out.note(text)

    async def fetch() -> GetResult:
        return await follow(args.sources[0], args.output, parallel=args.parallel, timeout_s=args.timeout,
                            tokens=tokens, transport=io.transport, on_progress=on_progress, on_state=on_state,
                            wait_s=args.wait, offload=io.offload)

    result = await _fetch(progress, fetch, f"the verified blocks are kept in {part_path(args.output)}: run the "
                          "same command to resume")
    if isinstance(result, Failed):
        return result
    if is_tree:  # count what was put in place
        from lnet.client.formats.tree import walk

        entries = walk(args.output)
        files = sum(1 for entry in entries if entry.type == "file")
        return TreeFetched(result, args.output, files, len(entries), size, follow=True)
    return Fetched(result, follow=True)


async def _from_replicas(args: GetArgs, out: CommandOutput, io: ClientIO) -> Outcome:
    """``lnet-get URL ...``: one file from several HTTP replicas at once."""
    sha256 = args.replica.sha256
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        return Failed(ExitCode.USAGE, f"--sha256 wants 64 hex digits, not {sha256!r}")
    try:
        config = args.replica.plan_config(args.timeout)
    except ValueError as exc:
        return Failed(ExitCode.USAGE, str(exc))
    if args.output.is_dir():
        return Failed(ExitCode.USAGE, f"{args.output} is a directory: give the file's path")
    if (problem := file_option_problem("--trace", args.trace)) is not None:
        return Failed(ExitCode.USAGE, problem)
    from lnet.client.commands.outcome import ReplicasFetched
    from lnet.client.fetching.mirrors import fetch_mirrors
    from lnet.client.fetching.partfile import part_path
    from lnet.client.wire.range_connection import parse_url

    for url in args.sources:
        try:
            parse_url(url)
        except ValueError as exc:
            return Failed(ExitCode.USAGE, str(exc))
    progress = out.progress(args.no_progress)
    tasks: dict[int, TaskID] = {}

    def on_start(size: int, shown: list[str]) -> None:
        tasks[-1] = progress.add_task(args.output.name, total=size)
        for i, url in enumerate(shown):
            tasks[i] = progress.add_task(f"  {url.split('://', 1)[-1].split('/', 1)[0]}", total=None)

    def on_progress(replica: int, nbytes: int) -> None:
        progress.advance(tasks[-1], nbytes)
        progress.advance(tasks[replica], nbytes)

    async def fetch() -> MirrorResult:
        return await fetch_mirrors(
            args.sources, args.output, config=config, timeout_s=args.timeout, sha256=sha256,
            check_validators=not args.replica.ignore_validators, history=args.replica.history_file(),
            trace=args.trace, on_start=on_start, on_progress=on_progress, connect=io.connect, early=io.early)

    result = await _fetch(progress, fetch, f"what arrived is kept in {part_path(args.output)}: run the same "
                          "command to resume")
    return result if isinstance(result, Failed) else ReplicasFetched(result)


if __name__ == "__main__":
    sys.exit(main())
