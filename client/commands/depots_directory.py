"""``lnet depots`` with a depot directory: the depots file's depots asked as always, and every depot registered
in the directory listed from its entry (state ``registered``: its lease is alive; figures as it last wrote them),
or asked too with ``--check``. When the directory does not answer, the last list seen is shown, with its age."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lnet.client.commands import depots
from lnet.client.commands.depots import (
    DepotHealth,
    DepotsArgs,
    LinkFigure,
    exit_code,
    query_all,
    render_table,
    to_json,
)
from lnet.client.commands.discover import DirectoryUnavailable, Discovered, discover
from lnet.client.exits import ExitCode, run_interruptible
from lnet.client.formats.overlay import Overlay, OverlayError, url_key
from lnet.units import parse_duration

if TYPE_CHECKING:
    import httpx

    from lnet.directory.entries import DepotRecord

__all__ = ["directory_named", "health_from_record", "run", "run_with_directory"]


def run(args: DepotsArgs, *, transport: httpx.AsyncBaseTransport | None = None) -> int:
    """``lnet depots``: the directory's depots where one is named (``--directory``, ``$LNET_DIRECTORY`` or the
    depots file's), else the depots file's alone (``lnet.client.commands.depots.run``)."""
    from rich.console import Console

    if not directory_named(args.depots, args.directory):
        return depots.run(args, transport=transport)
    try:
        timeout_s = parse_duration(args.timeout)
        if timeout_s <= 0:
            raise ValueError("--timeout must be more than 0")
    except ValueError as exc:
        Console(stderr=True, highlight=False).print(f"lnet depots: {exc}", markup=False, soft_wrap=True)
        return ExitCode.USAGE
    return run_with_directory(args, timeout_s, transport=transport)


def directory_named(depots: Path | None, flag: str | None) -> bool:
    """Whether the command is to read a directory: ``--directory``, ``$LNET_DIRECTORY`` or the depots file's."""
    if flag is not None or os.environ.get("LNET_DIRECTORY"):
        return True
    try:
        return Overlay.load(depots).directory is not None
    except OverlayError:
        return False


def health_from_record(record: DepotRecord, names_by_url: Mapping[str, str], now: float) -> DepotHealth:
    """A registered depot as its entry describes it."""
    links = []
    for link in record.links:
        at = link.get("at")
        links.append(LinkFigure(
            to=str(link["to"]), peer=names_by_url.get(url_key(str(link["to"]))), source=str(link["source"]),
            mbps=float(link.get("mbps", 0.0)), count=int(link.get("count", 0)),
            age_s=max(0.0, now - float(at)) if isinstance(at, int | float) else None,
            rtt_ms=float(link["rtt_ms"]) if "rtt_ms" in link else None, failures=int(link.get("failures", 0)),
            error=None,
        ))
    return DepotHealth(
        record.name, record.url, "registered", f"entry written {max(0.0, now - record.updated):.0f}s ago",
        depot_name=record.name, version=record.version, protocol=record.protocol, capacity=record.capacity,
        used=record.capacity - record.free, max_allocation=record.max_allocation, max_duration=record.max_duration,
        token_required_for=record.token_required_for, links=tuple(links),
    )


def run_with_directory(args: DepotsArgs, timeout_s: float, *, transport: httpx.AsyncBaseTransport | None) -> int:
    from rich.console import Console

    from lnet.scheduler import EdgeMemory

    err = Console(stderr=True, highlight=False)

    async def gather() -> tuple[Discovered, list[DepotHealth]]:
        found = await discover(args.depots, args.directory, state_dir=EdgeMemory.default_path().parent,
                               timeout_s=timeout_s)
        now = time.time()
        asked = found.overlay if args.check else Overlay(
            found.overlay.here,
            {name: entry for name, entry in found.overlay.depots.items() if name not in found.records},
            found.overlay.source,
        )
        healths = await query_all(asked, timeout_s=timeout_s, transport=transport)
        # every registered depot is listed: those not asked (or left out of the overlay, as one that needs a
        # token the depots file does not give) from their entries
        names_by_url = {url_key(entry.url): name for name, entry in found.overlay.depots.items()}
        healths += [health_from_record(record, names_by_url, now)
                    for name, record in sorted(found.records.items()) if name not in asked.depots]
        return found, healths

    try:
        found, healths = run_interruptible(gather)
    except OverlayError as exc:
        err.print(f"lnet depots: {exc}", markup=False, soft_wrap=True)
        return ExitCode.USAGE
    except DirectoryUnavailable as exc:
        err.print(f"lnet depots: {exc}", markup=False, soft_wrap=True)
        return ExitCode.UNREACHABLE
    for line in found.notes:
        err.print(f"lnet depots: {line}", markup=False, soft_wrap=True)
    endpoints = ", ".join(found.ref.endpoints) if found.ref is not None else "-"
    if args.json:
        document = to_json(healths)
        document["directory"] = {"endpoints": list(found.ref.endpoints) if found.ref else [],
                                 "registered": len(found.records), "cache_age_s": found.cache_age_s}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=200)
        where = f"the directory at {endpoints}" + (f" (its list of {found.cache_age_s:.0f}s ago)"
                                                   if found.cache_age_s is not None else "")
        if found.overlay.source is not None:
            where += f" and {found.overlay.source}"
        out.print(render_table(healths, title=f"depots in {where}"))
    return exit_code(healths)
