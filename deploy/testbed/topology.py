"""The topology file: hosts, links between them, and the per-host TCP settings.

One file drives every backend (the network-namespace testbed and the docker-compose generator), so this module
only parses, validates and derives (addresses, shortest-delay routes); it runs nothing and touches no network.
"""

from __future__ import annotations

import heapq
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lnet.units import parse_size
from lnet.units.numbers import finite_number

__all__ = [
    "DEFAULT_CONGESTION",
    "DEFAULT_MTU",
    "DEFAULT_WINDOW_BYTES",
    "CONGESTION_CONTROLS",
    "Host",
    "Link",
    "Topology",
    "TopologyError",
]

DEFAULT_WINDOW_BYTES = 4 * 1024 * 1024
# Loss-based TCP is what the seed's effect is about (a short round trip recovers from a loss sooner).
DEFAULT_CONGESTION = "cubic"
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
DEFAULT_MTU = 9000
# Addresses: host i (in file order) is HOST_PREFIX.(i + 1); one /24, so at most 254 hosts.
HOST_PREFIX = "10.77.0"
MAX_HOSTS = 254
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")


class TopologyError(ValueError):
    """A topology file that cannot be used; the message names the problem."""


def _window(value: object, what: str) -> int:
    """A TCP window: `"256KiB"`, `"4MiB"`, `"64kB"` or an integer of bytes (``lnet.units.parse_size``), not 0."""
    if not isinstance(value, int | str):
        raise TopologyError(f"{what}: expected a size such as \"256KiB\", got {value!r}")
    try:
        n = parse_size(value)
    except ValueError as exc:
        raise TopologyError(f"{what}: {exc}") from None
    if n == 0:
        raise TopologyError(f"{what}: a window must be positive, got {value!r}")
    return n


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    window_bytes: int
    congestion: str


@dataclass(frozen=True)
class Link:
    """An undirected link; each direction gets these parameters independently (its own queue, its own losses)."""

    a: str
    b: str
    delay_ms: float
    rate_mbit: float | None = None  # None: no rate limit
    loss: float = 0.0
    jitter_ms: float = 0.0
    queue_ms: float | None = None  # None: default_queue_ms()

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))

    @property
    def effective_queue_ms(self) -> float:
        """The bounded queue before tail drop. By default one round trip of the link (the classic
        bandwidth-delay rule of thumb, so one loss-based stream can keep the link busy), at least 20 ms."""
        if self.queue_ms is not None:
            return self.queue_ms
        return max(20.0, 2.0 * self.delay_ms)


@dataclass(frozen=True)
class Topology:
    name: str
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    mtu: int = DEFAULT_MTU
    _by_name: Mapping[str, Host] = field(default_factory=dict, repr=False, compare=False)

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Topology:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise TopologyError(f"{path}: cannot read the topology file: {exc.strerror}") from exc
        try:
            return cls.parse(text, default_name=path.stem)
        except TopologyError as exc:
            raise TopologyError(f"{path}: {exc}") from exc

    @classmethod
    def parse(cls, text: str, default_name: str = "testbed") -> Topology:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TopologyError(f"not valid TOML: {exc}") from exc
        return cls.from_dict(doc, default_name=default_name)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], default_name: str = "testbed") -> Topology:
        _only_keys(doc, {"name", "mtu", "defaults", "hosts", "links"}, "the top level")
        name = doc.get("name", default_name)
        if not isinstance(name, str) or not _NAME.match(name):
            raise TopologyError(
                f"name {name!r}: use 1-31 characters of a-z, 0-9, '-' and '_', starting with a letter"
            )
        mtu = doc.get("mtu", DEFAULT_MTU)
        if not isinstance(mtu, int) or isinstance(mtu, bool) or not 576 <= mtu <= 65000:
            raise TopologyError(f"mtu {mtu!r}: expected an integer between 576 and 65000")

        defaults = doc.get("defaults", {})
        if not isinstance(defaults, dict):
            raise TopologyError("[defaults] must be a table")
        _only_keys(defaults, {"window", "congestion"}, "[defaults]")
        default_window = _window(defaults.get("window", DEFAULT_WINDOW_BYTES), "[defaults] window")
        default_cc = _congestion(defaults.get("congestion", DEFAULT_CONGESTION), "[defaults]")

        raw_hosts = doc.get("hosts", {})
        if not isinstance(raw_hosts, dict) or not raw_hosts:
            raise TopologyError("no hosts: add at least two [hosts.NAME] tables")
        if len(raw_hosts) > MAX_HOSTS:
            raise TopologyError(f"{len(raw_hosts)} hosts: at most {MAX_HOSTS} are supported")
        hosts: list[Host] = []
        for i, (hname, spec) in enumerate(raw_hosts.items()):
            where = f"[hosts.{hname}]"
            if not _NAME.match(hname):
                raise TopologyError(
                    f"host name {hname!r}: use 1-31 characters of a-z, 0-9, '-' and '_', starting with a letter"
                )
            if not isinstance(spec, dict):
                raise TopologyError(f"{where} must be a table")
            _only_keys(spec, {"window", "congestion"}, where)
            window = _window(spec["window"], f"{where} window") if "window" in spec else default_window
            cc = _congestion(spec.get("congestion", default_cc), where)
            hosts.append(Host(hname, f"{HOST_PREFIX}.{i + 1}", window, cc))
        if len(hosts) < 2:
            raise TopologyError("a topology needs at least two hosts")

        raw_links = doc.get("links", [])
        if not isinstance(raw_links, list) or not raw_links:
            raise TopologyError("no links: add [[links]] entries joining the hosts")
        names = {h.name for h in hosts}
        links: list[Link] = []
        seen: dict[frozenset[str], int] = {}
        for i, spec in enumerate(raw_links):
            link = _parse_link(spec, i, names)
            if link.key in seen:
                raise TopologyError(
                    f"links[{i}]: duplicate link between {link.a!r} and {link.b!r} "
                    f"(already links[{seen[link.key]}])"
                )
            seen[link.key] = i
            links.append(link)
        topo = cls(name=name, hosts=tuple(hosts), links=tuple(links), mtu=mtu)
        topo._check_connected()
        return topo

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {h.name: h for h in self.hosts})

    def to_dict(self) -> dict[str, Any]:
        """The topology in the file's layout (every host spelt out), e.g. to hand it to another process."""
        links = []
        for link in self.links:
            row: dict[str, Any] = {"a": link.a, "b": link.b, "delay_ms": link.delay_ms, "loss": link.loss,
                                   "jitter_ms": link.jitter_ms}
            if link.rate_mbit is not None:
                row["rate_mbit"] = link.rate_mbit
            if link.queue_ms is not None:
                row["queue_ms"] = link.queue_ms
            links.append(row)
        return {
            "name": self.name,
            "mtu": self.mtu,
            "hosts": {h.name: {"window": h.window_bytes, "congestion": h.congestion} for h in self.hosts},
            "links": links,
        }

    # -- queries ---------------------------------------------------------------------------------
    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def host(self, name: str) -> Host:
        try:
            return self._by_name[name]
        except KeyError:
            raise TopologyError(
                f"unknown host {name!r}; the hosts are {', '.join(self.host_names)}"
            ) from None

    def link(self, a: str, b: str) -> Link:
        self.host(a)
        self.host(b)
        for link in self.links:
            if link.key == frozenset((a, b)):
                return link
        raise TopologyError(f"no link between {a!r} and {b!r}")

    def with_link(self, link: Link) -> Topology:
        """A copy with one link's parameters replaced (the link must exist)."""
        self.link(link.a, link.b)
        links = tuple(link if old.key == link.key else old for old in self.links)
        return replace(self, links=links)

    def neighbours(self, name: str) -> list[tuple[str, Link]]:
        out = []
        for link in self.links:
            if link.a == name:
                out.append((link.b, link))
            elif link.b == name:
                out.append((link.a, link))
        return out

    def route(self, src: str, dst: str) -> list[str]:
        """The hosts along the shortest-delay route, both ends included. Ties go to fewer hops, then to
        the alphabetically first path, so routes are deterministic."""
        self.host(src)
        self.host(dst)
        best: dict[str, tuple[float, int, tuple[str, ...]]] = {}
        heap: list[tuple[float, int, tuple[str, ...]]] = [(0.0, 0, (src,))]
        while heap:
            delay, hops, path = heapq.heappop(heap)
            here = path[-1]
            if here in best:
                continue
            best[here] = (delay, hops, path)
            if here == dst:
                return list(path)
            for there, link in self.neighbours(here):
                if there not in best:
                    heapq.heappush(heap, (delay + link.delay_ms, hops + 1, (*path, there)))
        raise TopologyError(f"no route from {src!r} to {dst!r}")

    def next_hop(self, src: str, dst: str) -> str:
        return self.route(src, dst)[1]

    def route_delay_ms(self, src: str, dst: str) -> float:
        path = self.route(src, dst)
        return sum(self.link(a, b).delay_ms for a, b in zip(path, path[1:], strict=False))

    def _check_connected(self) -> None:
        first = self.hosts[0].name
        reached = {first}
        todo = [first]
        while todo:
            here = todo.pop()
            for there, _ in self.neighbours(here):
                if there not in reached:
                    reached.add(there)
                    todo.append(there)
        missing = [h for h in self.host_names if h not in reached]
        if missing:
            raise TopologyError(
                f"the topology is disconnected: {', '.join(missing)} cannot be reached from {first!r}"
            )


def _only_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise TopologyError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _congestion(value: object, where: str) -> str:
    if value not in CONGESTION_CONTROLS:
        raise TopologyError(
            f"{where} congestion {value!r}: expected one of {', '.join(CONGESTION_CONTROLS)}"
        )
    assert isinstance(value, str)
    return value


def _number(spec: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> float | None:
    if key not in spec:
        if required:
            raise TopologyError(f"{where}: missing {key}")
        return None
    return finite_number(spec[key], f"{where}: {key}", error=TopologyError)


def _parse_link(spec: object, i: int, names: set[str]) -> Link:
    where = f"links[{i}]"
    if not isinstance(spec, dict):
        raise TopologyError(f"{where} must be a table")
    _only_keys(spec, {"a", "b", "delay_ms", "rate_mbit", "loss", "jitter_ms", "queue_ms"}, where)
    ends = []
    for end in ("a", "b"):
        host = spec.get(end)
        if not isinstance(host, str):
            raise TopologyError(f"{where}: missing {end} (a host name)")
        if host not in names:
            raise TopologyError(
                f"{where}: {end} = {host!r} is not a defined host; the hosts are {', '.join(sorted(names))}"
            )
        ends.append(host)
    a, b = ends
    where = f"{where} ({a}-{b})"
    if a == b:
        raise TopologyError(f"{where}: a link joins two different hosts")
    delay = _number(spec, "delay_ms", where, required=True)
    assert delay is not None
    rate = _number(spec, "rate_mbit", where)
    loss = _number(spec, "loss", where) or 0.0
    jitter = _number(spec, "jitter_ms", where) or 0.0
    queue = _number(spec, "queue_ms", where)
    return validate_link(Link(a, b, delay, rate, loss, jitter, queue), where)


def validate_link(link: Link, where: str) -> Link:
    """Range checks shared by the file parser and live changes (`Testbed.set_link`)."""
    if link.delay_ms < 0:
        raise TopologyError(f"{where}: delay_ms must not be negative, got {link.delay_ms}")
    if link.rate_mbit is not None and link.rate_mbit <= 0:
        raise TopologyError(f"{where}: rate_mbit must be positive, got {link.rate_mbit}")
    if not 0.0 <= link.loss < 1.0:
        raise TopologyError(f"{where}: loss is a fraction in [0, 1), got {link.loss}")
    if link.jitter_ms < 0:
        raise TopologyError(f"{where}: jitter_ms must not be negative, got {link.jitter_ms}")
    if link.jitter_ms > link.delay_ms:
        raise TopologyError(f"{where}: jitter_ms ({link.jitter_ms}) must not exceed delay_ms ({link.delay_ms})")
    if link.queue_ms is not None and link.queue_ms <= 0:
        raise TopologyError(f"{where}: queue_ms must be positive, got {link.queue_ms}")
    return link
