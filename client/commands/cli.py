"""``lnet``: the umbrella command, one subcommand per job (``lnet report``, ``lnet depots``, ``lnet demo``).

Each subcommand is a ``Subcommand`` in ``SUBCOMMANDS``: a name, a line of help, a function that adds its
arguments to its parser, the typed options they parse into (``options``: the parsing step, the only code that
sees the ``argparse.Namespace``), and a function that runs it on them and returns an ``ExitCode``. Adding one is
adding an entry; ``main`` knows none of them by name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from lnet.client.commands import datasets, depots
from lnet.client.commands.output import parse_arguments
from lnet.client.exits import EXIT_CODES_HELP, ExitCode, is_interrupt, run_interruptible
from lnet.client.formats import report
from lnet.units import format_size, parse_size

__all__ = ["SUBCOMMANDS", "DemoArgs", "ReportArgs", "Subcommand", "main"]

Options = TypeVar("Options")


@dataclass(frozen=True)
class Subcommand(Generic[Options]):
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    options: Callable[[argparse.Namespace], Options]
    run: Callable[[Options], int]
    description: str = ""
    epilog: str = EXIT_CODES_HELP

    def bound(self, ns: argparse.Namespace) -> Callable[[], int]:
        """The subcommand on its options, parsed out of ``ns``: what ``main`` runs."""
        options = self.options(ns)
        return lambda: self.run(options)


# -- lnet report ----------------------------------------------------------------------------------------------



def _run_depots(args: depots.DepotsArgs) -> int:
    """``lnet depots``: loads the directory's client (httpx) only once the options are parsed."""
    from lnet.client.commands.depots_directory import run

    return run(args)

def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", type=Path, metavar="FILE", help="a report lnet-send --report wrote")
    p.add_argument(
        "--plot", type=Path, metavar="OUT.png",
        help=f"draw throughput over time (every FILE, one line each) into OUT.png; needs {report.PLOT_INSTALL_HINT}",
    )


@dataclass(frozen=True)
class ReportArgs:
    """``lnet report``'s options (fields named as the flags)."""

    reports: tuple[Path, ...]
    plot: Path | None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> ReportArgs:
        return cls(tuple(ns.reports), ns.plot)


def _report(args: ReportArgs) -> int:
    from rich.console import Console

    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        reports = [report.load(path) for path in args.reports]
    except report.ReportError as exc:
        err.print(f"lnet report: invalid report: {exc}", markup=False, soft_wrap=True)
        return ExitCode.USAGE
    for loaded in reports:
        out.print(
            f"{loaded.file}: {format_size(loaded.size)} in {loaded.seconds:.1f} s "
            f"({loaded.mbps:.2f} Mbit/s), {len(loaded.path_attempts)} path attempts",
            markup=False,
            soft_wrap=True,
        )
        out.print(report.attempts_table(loaded))
        if loaded.edges:
            out.print(report.edges_table(loaded))
    if args.plot is not None:
        try:
            report.plot(reports, args.plot, labels=[path.stem for path in args.reports] if len(reports) > 1 else None)
        except report.PlotUnavailable as exc:
            err.print(f"lnet report: {exc}", markup=False, soft_wrap=True)
            return ExitCode.USAGE
        except OSError as exc:
            err.print(f"lnet report: cannot write {args.plot}: {exc.strerror or exc}", markup=False, soft_wrap=True)
            return ExitCode.FAILED
        out.print(f"plot saved to {args.plot}", markup=False, soft_wrap=True)
    return ExitCode.OK


SUBCOMMANDS: list[Subcommand[Any]] = [
    Subcommand(
        "report",
        "show a transfer report: the path attempts, the edges, and a throughput plot",
        _report_arguments,
        ReportArgs.from_namespace,
        _report,
        description="Show what lnet-send --report saved: the path attempts (path, duration, Mbit/s), the measured "
        "edges, and with --plot the throughput over time as a PNG.",
    ),
    Subcommand(
        "depots",
        "is the overlay healthy? every depot of the depots file: state, capacity, limits, links",
        depots.add_arguments,
        depots.DepotsArgs.from_namespace,
        _run_depots,
        description=depots.DESCRIPTION,
        epilog=depots.EPILOG,
    ),
    Subcommand(
        "publish",
        "record where a dataset's replicas are in the depot directory, so that lnet-get NAME finds them",
        datasets.add_publish_arguments,
        datasets.PublishArgs.from_namespace,
        datasets.run_publish,
        description="Record NAME's sources (HTTP mirrors that honour Range, or the URL a finished lnet-send "
        "printed) in the depot directory (docs/directory.md) until --expires; lnet-get NAME --directory URL then "
        "fetches from them. A source that carries a capability is readable by whoever etcd's roles let read the "
        "datasets.",
    ),
    Subcommand(
        "demo",
        "the seed's experiment on the emulated Abilene testbed: direct vs cold vs warm start (needs root)",
        lambda p: _demo_arguments(p),
        lambda ns: DemoArgs.from_namespace(ns),
        lambda args: _demo(args),
        description="Bring up the emulated Abilene testbed (network namespaces and the userspace link emulator), "
        "start depots on its hosts, send one file from ORNL to Sunnyvale pinned to the direct path, with a cold "
        "start and with a warm start, fetch it at Sunnyvale, and print the comparison, the path attempts and a "
        "plot. Needs root; --local runs the depot round trip on this machine instead (no root, no emulation).",
    ),
]


# -- lnet demo ------------------------------------------------------------------------------------------------


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", action="store_true", help="no testbed: two depots on loopback and an allocation's life")
    p.add_argument(
        "--size", default="96MiB", metavar="SIZE",
        help="the file to send (96MiB: the cold start needs about 45 s to measure the chain, and the warm start's "
        "steady state must outweigh the 4.5 s its first block takes through five hops)",
    )
    p.add_argument("--block-size", default="1MiB", metavar="SIZE", help="block size of every run (1MiB)")
    p.add_argument("--max-inflight", type=int, default=2, metavar="N", help="blocks per hop at once, every run (2)")
    p.add_argument("--out", type=Path, default=Path("lnet-demo"), metavar="DIR", help="where files go (./lnet-demo)")


@dataclass(frozen=True)
class DemoArgs:
    """``lnet demo``'s options (fields named as the flags)."""

    local: bool
    size: str
    block_size: str
    max_inflight: int
    out: Path

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> DemoArgs:
        return cls(ns.local, ns.size, ns.block_size, ns.max_inflight, ns.out)


def _demo(args: DemoArgs) -> int:
    if args.local:
        from lnet.client.commands import demo

        return demo.main([])
    try:
        size = parse_size(args.size)
        parse_size(args.block_size)
    except ValueError as exc:
        print(f"lnet demo: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    from lnet.testbed import TestbedError
    from lnet.testbed.demo import run_demo

    try:
        return run_interruptible(
            lambda: run_demo(args.out, size=size, block=args.block_size, max_inflight=args.max_inflight)
        )
    except TestbedError as exc:
        print(
            f"lnet demo: {exc}\n"
            "The demo emulates long-distance links with network namespaces, which needs root: run it as root "
            "(sudo ./run demo), or run `./run demo --local` for the depot round trip on this machine.",
            file=sys.stderr,
        )
        return ExitCode.FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lnet",
        description="lnet: long-distance bulk transfers through a chain of depots.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for sub in SUBCOMMANDS:
        p = commands.add_parser(
            sub.name, help=sub.help, description=sub.description or sub.help, epilog=sub.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_arguments(p)
        p.set_defaults(subcommand=sub)
    return parser


def _bound(ns: argparse.Namespace) -> Callable[[], int]:
    """The parsing step's result: the chosen subcommand, bound to its options."""
    sub: Subcommand[Any] = ns.subcommand
    return sub.bound(ns)


def main(argv: list[str] | None = None) -> int:
    command = parse_arguments(_parser(), argv, _bound)
    if isinstance(command, int):
        return command
    try:
        return command()
    except BaseException as exc:  # Ctrl-C: a word and its exit status, not a traceback
        if not is_interrupt(exc):
            raise
        print("lnet: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
