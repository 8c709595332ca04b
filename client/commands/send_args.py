"""``lnet-send``'s options: the parser, its defaults, and ``SendArgs``, what it parses ``argv`` into.

Both halves of the command import it: ``commands.send`` (the entry point, which parses) and
``commands.send_transfer`` (which runs the transfer on the parsed options). It loads only argparse, the replica
options and the exit codes, so that ``--help`` and usage errors answer at once.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from lnet.client.commands import replica_options
from lnet.client.commands.output import file_option_problem
from lnet.client.commands.replica_options import ReplicaArgs
from lnet.client.exits import EXIT_CODES_HELP

__all__ = ["DEFAULT_DURATION_S", "DEFAULT_HASH", "DEFAULT_MAX_PATHS", "HASH_CHOICES", "SendArgs"]

DEFAULT_DURATION_S = 24 * 3600.0
"""How long the destination keeps the blocks when ``--duration`` is not given, if it allows that long."""
HASH_CHOICES = ("blake3", "sha256", "blake2b")
"""``--hash``: the manifest's ``HASH_ALGORITHMS`` (not imported here, to keep ``--help`` quick)."""
DEFAULT_HASH = "blake3"
DEFAULT_MAX_PATHS = 3
"""``--max-paths`` when not given, chosen by measurement (docs/scheduler.md, "Choosing the default of
`--max-paths`: 3"): bench/pathchoice.py on seven topologies, the warm start with up to 3 paths never lost to one
path and gained 1.12-1.62x; the cold start lost at most 4%, where every route shares one bottleneck."""

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

Room: before the first block, a file the destination cannot hold whole (its free space in /v1/status) stops at
once (exit 3) unless --follow is given. During the transfer a depot that stays full waits at most --space-wait
(10m), shown on the progress line, then the transfer stops (exit 3) with how to resume.

The far end: every lnet-send publishes its manifest at the destination and prints, on stderr, the command to run
there: lnet-get http://HOST:PORT/v1/data/CAPABILITY -o NAME. That URL is all the receiver needs (with its depots
file for tokens where a depot wants one); it is a secret, like every capability. With --follow the receiver drains
the destination as blocks land (writes each to its place, frees it there), so a file far larger than any depot
goes through; the sender keeps at most what the depots lend in flight and waits for the receiver while they are
full.

examples:
  lnet-send data.h5 --to sunnyvale                        # the scheduler picks and re-picks the chain
  lnet-send data.h5 --to sunnyvale --path atl,ind,kc,den  # pinned: this chain, no adaptation
  lnet-send data.h5 --to sunnyvale --cold --report run.json && lnet report run.json --plot run.png
  lnet-send data.h5 --to sunnyvale --max-paths 3          # up to 3 disjoint chains at once, blocks shared by rate
  lnet-get data.h5.manifest.json -o data.h5               # at the far end: fetch and verify
  lnet-send big.tar --to sunnyvale --follow               # larger than the depots: prints the receiver's command,
  lnet-get http://svl.example.org:6714/v1/data/CAP -o big.tar --follow   # run there, at the same time or later
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
    p.add_argument("--directory", metavar="URL",
                   help="also use the depots registered in this depot directory (etcd; docs/directory.md)")
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
    p.add_argument("--hash", choices=HASH_CHOICES, metavar="ALG",
                   help="the blocks' and the whole file's hash, checked where each block lands and written to the "
                   "manifest: blake3 (the default: about a third of sha256's CPU per byte, which lets a fast chain "
                   "go faster), sha256 or blake2b. Resuming keeps the interrupted run's hash")
    p.add_argument("--duration", metavar="TIME",
                   help="how long the destination keeps the file (default: the longest the destination allows, "
                   "at most 1d; a longer --duration than it allows fails at once)")
    p.add_argument(
        "--follow", action="store_true",
        help="a receiver at the far end drains the destination as blocks land (lnet-get URL --follow, the command "
        "printed at the start): the file may be far larger than any depot; the sender waits for the receiver "
        "while the depots are full, and ends once every block is published for it",
    )
    p.add_argument(
        "--space-wait", default="10m", metavar="TIME",
        help="how long a full depot is waited for (another client's data, or with --follow the receiver) before "
        "the transfer stops with how to resume (10m)",
    )
    p.add_argument("--max-inflight", type=int, default=16, metavar="N", help="most blocks on one hop at once (16)")
    p.add_argument("--timeout", default="30s", metavar="TIME", help="bound on every network wait (30s)")
    p.add_argument("--manifest", type=Path, metavar="FILE", help="where to write the manifest (FILE.manifest.json)")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the transfer report (path attempts, timeline)")
    p.add_argument("--restart", action="store_true", help="do not resume an interrupted run of this transfer: "
                   "free the blocks it sent and send everything again")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end instead of a summary")
    p.add_argument("--trace", type=Path, metavar="FILE", help="write every measurement the scheduler gets and every "
                   "decision it makes (with the weights it compared) to FILE, one JSON object a line: why a path "
                   "was or was not taken")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    replica_options.add_arguments(p, "replicas (with --source)")
    # -- directory trees (lnet.client.sending.tree; docs/client.md, "Trees and small files") --
    p.add_argument("--priority", action="append", metavar="GLOB",
                   help="a tree's files matching GLOB (path or name) go first; repeatable")
    p.add_argument("--pipeline-depth", type=int, metavar="N",
                   help="a tree: fixed pipelining depth N (N blocks in flight per hop, batches of N+1 files) "
                   "instead of the planner's, as the seed's DEFAULT baseline")
    p.add_argument("--bdp", metavar="SIZE", help="a tree: the first hop's bandwidth-delay product (default: measured)")
    return p


@dataclass(frozen=True)
class SendArgs:
    """``lnet-send``'s options, parsed (fields named as the flags; ``replica``: the replica group's)."""

    file: Path | None
    source: tuple[str, ...]
    spool: Path | None
    to: str
    depots: Path | None
    path: str | None
    max_paths: int | None
    cold: bool
    warm: bool
    memory: Path | None
    block_size: str
    hash: str | None
    duration: str | None
    max_inflight: int
    timeout: str
    manifest: Path | None
    report: Path | None
    restart: bool
    json: bool
    trace: Path | None
    no_progress: bool
    replica: ReplicaArgs
    priority: tuple[str, ...]
    pipeline_depth: int | None
    bdp: str | None
    follow: bool = False
    space_wait: str = "10m"
    directory: str | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> SendArgs:
        return cls(
            ns.file, tuple(ns.source), ns.spool, ns.to, ns.depots, ns.path, ns.max_paths, ns.cold, ns.warm, ns.memory,
            ns.block_size, ns.hash, ns.duration, ns.max_inflight, ns.timeout, ns.manifest, ns.report, ns.restart,
            ns.json, ns.trace, ns.no_progress, ReplicaArgs.from_namespace(ns), tuple(ns.priority or ()),
            ns.pipeline_depth, ns.bdp, ns.follow, ns.space_wait, ns.directory,
        )

    @classmethod
    def parse(cls, argv: list[str]) -> SendArgs:
        """``argv`` parsed (argparse exits on ``--help`` and on a usage error, as the command does)."""
        parser = _parser()
        ns = parser.parse_args(argv)
        if (problem := file_option_problem("--trace", ns.trace)) is not None:
            parser.error(problem)
        return cls.from_namespace(ns)
