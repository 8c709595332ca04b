"""``lnet depots``: is the overlay healthy? Every depot of the depots file asked for ``/v1/status`` at once.

``query_depot`` asks one depot through the one ``DepotClient`` (with the depots file's token, so that a depot
requiring it for status answers), every wait bounded by the timeout and the whole query too;
``health_from_status`` turns an answer into a ``DepotHealth`` (pure: the checks of what a depot must say);
``render_table`` and ``to_json`` show them; ``exit_code`` is what cron or a health check acts on.

It must stay light: it never imports the depot server (``lnet.depot.app``, starlette, hypercorn), only the
protocol's vocabulary through the depot client.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lnet.client.exits import ExitCode, run_interruptible
from lnet.client.formats.overlay import DepotEntry, Overlay, OverlayError, url_key
from lnet.units import format_size, parse_duration

if TYPE_CHECKING:  # loaded where they are used, so that `lnet --help` answers at once
    import httpx
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DepotHealth",
    "DepotsArgs",
    "LinkFigure",
    "State",
    "add_arguments",
    "exit_code",
    "health_from_status",
    "query_all",
    "query_depot",
    "render_table",
    "run",
    "to_json",
]

DEFAULT_TIMEOUT_S = 5.0
JSON_KIND = "lnet-depots/1"

State = Literal["ok", "registered", "unreachable", "busy", "refused", "not a depot"]
"""``registered``: listed by the depot directory (its entry is alive), not asked itself (``--check`` asks it)."""
# What each state means for the exit status: a depot that may answer later, or a depots file to fix.
_TRY_LATER: frozenset[State] = frozenset({"unreachable", "busy"})
_FIX_CONFIG: frozenset[State] = frozenset({"refused", "not a depot"})


@dataclass(frozen=True)
class LinkFigure:
    """One entry of a depot's ``links``: what it measured pushing to a peer (``peer``: its name in the depots
    file, None for a host the file does not name)."""

    to: str
    peer: str | None
    source: str
    mbps: float
    count: int
    age_s: float | None
    rtt_ms: float | None
    failures: int
    error: str | None


@dataclass(frozen=True)
class DepotHealth:
    """What ``lnet depots`` learnt of one depot. Figures are None when the depot did not answer."""

    name: str
    url: str
    state: State
    reason: str | None = None
    seconds: float | None = None
    depot_name: str | None = None
    version: str | None = None
    protocol: int | None = None
    capacity: int | None = None
    used: int | None = None
    max_allocation: int | None = None
    max_duration: float | None = None
    in_flight: int | None = None
    token_required_for: tuple[str, ...] = ()
    links: tuple[LinkFigure, ...] = ()

    @property
    def free(self) -> int | None:
        return None if self.capacity is None or self.used is None else max(0, self.capacity - self.used)

    @property
    def newest_weather_age_s(self) -> float | None:
        """The age of the newest figure among the depot's links (None: it has measured nothing lately)."""
        ages = [link.age_s for link in self.links if link.age_s is not None]
        return min(ages) if ages else None


# -- the checks of an answer (pure) ----------------------------------------------------------------------------


class _Malformed(ValueError):
    pass


def health_from_status(
    entry: DepotEntry, status: Any, names_by_url: Mapping[str, str], seconds: float | None = None
) -> DepotHealth:
    """A depot's health from its ``/v1/status`` answer; an answer that is not a depot's is ``not a depot``."""
    try:
        if not isinstance(status, dict):
            raise _Malformed(f"/v1/status answered {type(status).__name__}, not a map")
        links = status.get("links", [])
        if not isinstance(links, list):
            raise _Malformed("its links are not a list")
        required = status.get("token_required_for", [])
        if not isinstance(required, list) or not all(isinstance(op, str) for op in required):
            raise _Malformed("its token_required_for is not a list of names")
        saturated = status.get("saturated") is True  # every request place taken: it answers, but refuses work
        limit = status.get("max_concurrent_requests")
        return DepotHealth(
            entry.name,
            entry.url,
            "busy" if saturated else "ok",
            f"saturated: all {limit} of its request places are taken" if saturated else None,
            seconds=seconds,
            depot_name=_field(status, "name", str),
            version=_field(status, "version", str),
            protocol=_field(status, "protocol", int),
            capacity=_field(status, "capacity", int),
            used=_field(status, "used", int),
            max_allocation=_field(status, "max_allocation", int),
            max_duration=float(_field(status, "max_duration", float)),
            in_flight=_field(status, "in_flight", int, required=False),
            token_required_for=tuple(required),
            links=tuple(_link(raw, names_by_url) for raw in links),
        )
    except _Malformed as exc:
        return DepotHealth(entry.name, entry.url, "not a depot", f"not an lnet depot's status: {exc}", seconds)


def _field(status: dict[str, Any], key: str, kind: type, *, required: bool = True) -> Any:
    value = status.get(key)
    if value is None and not required:
        return None
    if kind is str:
        ok = isinstance(value, str)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        ok = False
    else:
        ok = isinstance(value, int) if kind is int else math.isfinite(value)
    if not ok:
        raise _Malformed(f"{key!r} is missing or not a {'number' if kind is float else kind.__name__}")
    return value


def _link(raw: Any, names_by_url: Mapping[str, str]) -> LinkFigure:
    if not isinstance(raw, dict) or not isinstance(raw.get("to"), str):
        raise _Malformed("a link without 'to'")

    def number(key: str) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise _Malformed(f"a link's {key!r} is not a number")
        return float(value)

    error = raw.get("error")
    return LinkFigure(
        to=raw["to"],
        peer=names_by_url.get(url_key(raw["to"])),
        source=str(raw.get("source", "copy")),
        mbps=number("mbps") or 0.0,
        count=int(number("count") or 0),
        age_s=number("age_s"),
        rtt_ms=number("rtt_ms"),
        failures=int(number("failures") or 0),
        error=error if isinstance(error, str) else None,
    )


# -- asking the depots -----------------------------------------------------------------------------------------


async def query_depot(
    entry: DepotEntry,
    names_by_url: Mapping[str, str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    transport: httpx.AsyncBaseTransport | None = None,
) -> DepotHealth:
    """Ask one depot for its status: never raises for anything the depot or the network does, and returns
    within ``timeout_s`` (each network wait is bounded by it, and so is the whole)."""
    import trio

    from lnet.client.wire.depot_client import (
        Busy,
        DepotClient,
        DepotError,
        DepotTimeout,
        DepotUnreachable,
        Forbidden,
        Unauthorized,
    )

    started = trio.current_time()
    status: Any = None
    failure: tuple[State, str] | None = None
    with trio.move_on_after(timeout_s) as deadline:
        try:
            async with DepotClient(
                entry.url, token=entry.token, timeout=timeout_s, transport=transport, max_connections=1
            ) as client:
                status = await client.status()
        except DepotTimeout:
            failure = ("unreachable", f"no answer within {timeout_s:g}s")
        except DepotUnreachable as exc:
            failure = ("unreachable", str(exc).removeprefix(f"{entry.url}: "))
        except Busy as exc:
            failure = ("busy", f"{exc.status} busy: {exc.message}")
        except (Unauthorized, Forbidden) as exc:
            hint = "the depots file gives no token for it" if entry.token is None else "its token is refused"
            failure = ("refused", f"{exc.status} {exc.code}: {exc.message} ({hint})")
        except DepotError as exc:
            # Another service, or a proxy's error page: the message says what came back (HTTP 404, text/html).
            failure = ("not a depot", f"it answers /v1/status, but not as an lnet depot does: {exc.message}")
    seconds = trio.current_time() - started
    if deadline.cancelled_caught:
        failure = ("unreachable", f"no answer within {timeout_s:g}s")
    if failure is not None:
        return DepotHealth(entry.name, entry.url, failure[0], failure[1][:300], seconds)
    return health_from_status(entry, status, names_by_url, seconds)


async def query_all(
    overlay: Overlay,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[DepotHealth]:
    """Every depot of the overlay, asked at once; in the depots file's order."""
    import trio

    names_by_url: dict[str, str] = {}
    for name, entry in overlay.depots.items():  # two names for one URL: the first in the file
        names_by_url.setdefault(url_key(entry.url), name)
    entries = list(overlay.depots.values())
    results: list[DepotHealth | None] = [None] * len(entries)

    async def one(index: int, entry: DepotEntry) -> None:
        results[index] = await query_depot(entry, names_by_url, timeout_s=timeout_s, transport=transport)

    async with trio.open_nursery() as nursery:
        for index, entry in enumerate(entries):
            nursery.start_soon(one, index, entry)
    return [result for result in results if result is not None]


def exit_code(healths: Sequence[DepotHealth]) -> ExitCode:
    """``UNREACHABLE`` if any depot did not answer (or was busy), else ``USAGE`` if any refused the depots file's
    token or is not a depot, else ``OK``."""
    states = {health.state for health in healths}
    if states & _TRY_LATER:
        return ExitCode.UNREACHABLE
    if states & _FIX_CONFIG:
        return ExitCode.USAGE
    return ExitCode.OK


# -- showing them ----------------------------------------------------------------------------------------------


def to_json(healths: Sequence[DepotHealth]) -> dict[str, Any]:
    depots = []
    for health in healths:
        item = asdict(health)
        item["token_required_for"] = list(health.token_required_for)
        item["links"] = [asdict(link) for link in health.links]
        item["free"] = health.free
        item["newest_weather_age_s"] = health.newest_weather_age_s
        depots.append(item)
    return {
        "kind": JSON_KIND,
        "depots": depots,
        "healthy": sum(health.state in ("ok", "registered") for health in healths),
        "unhealthy": sum(health.state not in ("ok", "registered") for health in healths),
        "exit": int(exit_code(healths)),
    }


_FIGURES = frozenset({"free / total", "max alloc", "max time", "in flight", "weather"})


def render_table(healths: Sequence[DepotHealth], title: str | None = None) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=True)
    for column in ("depot", "state", "version", "free / total", "max alloc", "max time", "in flight", "weather",
                   "links (per stream)"):
        table.add_column(column, justify="right" if column in _FIGURES else "left")
    for health in healths:
        name = Text(health.name)
        if health.depot_name is not None and health.depot_name != health.name:
            name.append(f"\n(calls itself {health.depot_name})", style="dim")
        name.append(f"\n{health.url}", style="dim")
        if health.state not in ("ok", "registered"):
            state = Text(f"{health.state}\n{health.reason or ''}".rstrip(), style="bold red")
            table.add_row(name, state, *(["-"] * 6), "")
            continue
        state = Text(health.state, style="green")
        if health.reason:  # a registered depot: how old its entry is
            state.append(f"\n{health.reason}", style="dim")
        if health.token_required_for:
            state.append(f"\ntoken for {', '.join(health.token_required_for)}", style="dim")
        table.add_row(
            name,
            state,
            f"{health.version} (protocol {health.protocol})",
            f"{_size(health.free)} / {_size(health.capacity)}",
            _size(health.max_allocation),
            _duration(health.max_duration),
            str(health.in_flight) if health.in_flight is not None else "-",
            _age(health.newest_weather_age_s),
            _links(health.links),
        )
    return table


def _size(nbytes: int | None) -> str:
    return "-" if nbytes is None else format_size(nbytes)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    return f"{seconds:.0f}s ago" if seconds < 60 else f"{_duration(seconds)} ago"


def _links(links: Sequence[LinkFigure]) -> Text:
    from rich.text import Text

    text = Text()
    for link in links:
        if text:
            text.append("\n")
        text.append(link.peer or link.to, style="bold" if link.peer else "")
        if link.count:
            detail = f" {link.mbps:.1f} Mbit/s ({link.source}, {link.count}x, {_age(link.age_s)}"
            detail += f", rtt {link.rtt_ms:.1f} ms)" if link.rtt_ms is not None else ")"
            text.append(detail)
        else:
            text.append(f" ({link.source})")
        if link.failures:
            text.append(f" {link.failures} failed: {(link.error or '')[:80]}", style="yellow")
    return text if text else Text("none", style="dim")


# -- the command -----------------------------------------------------------------------------------------------

DESCRIPTION = """\
Ask every depot in the depots file for its status, all at once, and show one table: whether it answered
(and if not, why), its version, free and total capacity, its limits (the largest allocation, the longest
lifetime), the requests it is serving, the age of its newest network-weather figure, and the links it has
measured to its peers (per-stream Mbit/s, from its copies and probes, by the depots file's names).

The depots file is --depots FILE, else $LNET_DEPOTS, else depots.toml in your config directory; a depot's
token there is sent with the status request (a depot may require it: require_token_for)."""

EPILOG = """\
examples:
  lnet depots                              # the table
  lnet depots --json | jq '.depots[] | select(.state != "ok")'
  lnet depots --timeout 2s || alert        # from cron or a health check

states:
  ok           answered /v1/status
  unreachable  no connection, a TLS failure, or no answer within --timeout
  busy         answered 503 busy (serving its max_concurrent_requests)
  refused      401/403: it needs the operator token, or refuses the depots file's token
  not a depot  answered, but not as an lnet depot does (another service, a wrong port or path)

exit status:
  0    every depot answered
  2    a depot refused the depots file's token or is not a depot (fix the file), or the file is invalid
  3    a depot is unreachable or busy (it may answer later); this wins over 2"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--depots", type=Path, metavar="FILE", help="the depots file (default: $LNET_DEPOTS, then the "
                   "user's config directory)")
    p.add_argument("--directory", metavar="URL", help="also list every depot registered in this depot directory "
                   "(etcd; docs/directory.md), from its entry")
    p.add_argument("--check", action="store_true", help="with a directory: ask its depots for their status too")
    p.add_argument("--json", action="store_true", help=f"print one JSON object ({JSON_KIND}) instead of the table")
    p.add_argument(
        "--timeout", default=f"{DEFAULT_TIMEOUT_S:g}s", metavar="TIME",
        help=f"bound on each depot's answer, the whole query included ({DEFAULT_TIMEOUT_S:g}s)",
    )


@dataclass(frozen=True)
class DepotsArgs:
    """``lnet depots``'s options (fields named as the flags)."""

    depots: Path | None
    json: bool
    timeout: str
    directory: str | None = None
    check: bool = False

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> DepotsArgs:
        return cls(ns.depots, ns.json, ns.timeout, ns.directory, ns.check)


def run(args: DepotsArgs, *, transport: httpx.AsyncBaseTransport | None = None) -> int:
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    try:
        timeout_s = parse_duration(args.timeout)
        if timeout_s <= 0:
            raise ValueError("--timeout must be more than 0")
        overlay = Overlay.load(args.depots)
    except (ValueError, OverlayError) as exc:
        err.print(f"lnet depots: {exc}", markup=False, soft_wrap=True)
        return ExitCode.USAGE
    healths = run_interruptible(lambda: query_all(overlay, timeout_s=timeout_s, transport=transport))
    if args.json:
        sys.stdout.write(json.dumps(to_json(healths), indent=2) + "\n")
    else:
        out = Console(highlight=False)
        if not out.is_terminal:  # cron mail and log files: the table as wide as it wants, not folded at 80
            out = Console(highlight=False, width=200)
        out.print(render_table(healths, title=f"depots in {overlay.source}"))
        unhealthy = [health for health in healths if health.state != "ok"]
        if unhealthy:
            err.print(f"{len(unhealthy)} of {len(healths)} depots did not answer as they should: "
                      + ", ".join(health.name for health in unhealthy), markup=False, soft_wrap=True)
    return exit_code(healths)
