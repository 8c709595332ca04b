"""Seeded random replica sets for lnet-get's multi-source benchmark: the testbed topologies and the
mid-run events that `bench/multisource.py --random N --seed S` runs aria2 and lnet-get on, beside its named
scenarios on deploy/topologies/replicas.toml.

``replica_set(seed, index)`` is a pure function: the same arguments give the same set, bit for bit (its random
numbers come from a generator seeded with the pair). It builds and checks; it runs nothing and touches no network.
Every set has the shape of replicas.toml: a ``client`` behind its access link to its provider's edge router
``isp``, and replicas ``r1``..``rN`` each on its own link to ``isp``.

What is drawn, and why the ranges (the testbed is one userspace emulator process on a 2-core machine that also
runs nginx, aria2c and lnet-get; it carried about 4 Gbit/s at MTU 9000 with round trips still exact, and the
clients are what the two cores are busy with, so the replicas' rates stay within what one client has been
measured to take on it, 140-200 Mbit/s on replicas.toml, with room):

- the number of replicas, 3 to 8;
- each replica's link rate, log-uniform from 5 Mbit/s to min(80, 320 / N) Mbit/s, so their sum is at most
  320 Mbit/s; a sum below 40 Mbit/s is scaled up to 40 (the shape kept), so that no set takes minutes;
- each replica's one-way delay, log-uniform 1-150 ms, and the access link's 0.5-3 ms: round trips
  client-replica from 3 ms to about 300 ms (every delay is applied in each direction). Windows stay at the
  testbed's 4 MiB, above every replica's bandwidth-delay product (at most 80 Mbit/s x 306 ms = 3.1 MB);
- the client's access link: by the index, every other pair of kinds, the bottleneck (0.5 to 0.85 of the
  replicas' sum) or not (1.25 to 2 times it);
- the kind, by the index (``KINDS[index % 3]``): ``steady``; ``slow``, one replica (any of them) whose link rate
  drops to 0.1-0.5 of itself; ``die``, one replica whose nginx is killed. The change comes at 0.25-0.75 of the
  run's physical-limit time (``ReplicaEvent.at_fraction``), counted from the run's start, as the named
  scenarios count their half time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from .topology import Topology

__all__ = [
    "ACCESS_DELAY_MS",
    "CHANGE_AT",
    "KINDS",
    "MAX_REPLICAS",
    "MIN_REPLICAS",
    "REPLICA_DELAY_MS",
    "REPLICA_MBIT",
    "SLOW_FACTOR",
    "SUM_MBIT",
    "Replica",
    "ReplicaEvent",
    "ReplicaSet",
    "replica_set",
]

Kind = Literal["steady", "slow", "die"]
KINDS: tuple[Kind, ...] = ("steady", "slow", "die")
MIN_REPLICAS, MAX_REPLICAS = 3, 8
REPLICA_MBIT = (5.0, 80.0)
SUM_MBIT = (40.0, 320.0)
"""The replicas' rates add up to at least and at most these (the upper end by construction of each rate's range)."""
REPLICA_DELAY_MS = (1.0, 150.0)
ACCESS_DELAY_MS = (0.5, 3.0)
ACCESS_BOTTLENECK = (0.5, 0.85)
"""The access link's rate over the replicas' sum where it is the bottleneck ..."""
ACCESS_HEADROOM = (1.25, 2.0)
"""... and where it is not."""
SLOW_FACTOR = (0.1, 0.5)
CHANGE_AT = (0.25, 0.75)
WINDOW = "4MiB"
CLIENT, EDGE = "client", "isp"


@dataclass(frozen=True)
class Replica:
    name: str
    rate_mbit: float
    delay_ms: float  # one way on its link to the edge router, applied in each direction


@dataclass(frozen=True)
class ReplicaEvent:
    """What happens to one replica mid-run: its link rate goes to ``factor`` of itself (``slow``) or its nginx is
    killed (``die``, factor 0), ``at_fraction`` of the run's physical-limit time after the run starts."""

    kind: Literal["slow", "die"]
    replica: str
    at_fraction: float
    factor: float


@dataclass(frozen=True)
class ReplicaSet:
    seed: int
    index: int
    access_mbit: float
    access_delay_ms: float
    replicas: tuple[Replica, ...]
    event: ReplicaEvent | None

    @property
    def kind(self) -> Kind:
        return "steady" if self.event is None else self.event.kind

    @property
    def name(self) -> str:
        return f"rs-{self.seed}-{self.index}"

    @property
    def hosts(self) -> list[str]:
        return [r.name for r in self.replicas]

    @property
    def rates_mbit(self) -> dict[str, float]:
        return {r.name: r.rate_mbit for r in self.replicas}

    @property
    def access_is_bottleneck(self) -> bool:
        return self.access_mbit < sum(self.rates_mbit.values())

    def round_trip_ms(self, replica: str) -> float:
        return 2 * (self.access_delay_ms + next(r.delay_ms for r in self.replicas if r.name == replica))

    def rates_after_mbit(self) -> dict[str, float]:
        """The replicas' rates once the event has happened (the same rates if there is none)."""
        rates = self.rates_mbit
        if self.event is not None:
            rates[self.event.replica] *= self.event.factor
        return rates

    def describe(self) -> str:
        rates = "/".join(f"{r.rate_mbit:.0f}" for r in self.replicas)
        rtts = "/".join(f"{self.round_trip_ms(r.name):.0f}" for r in self.replicas)
        bottleneck = "the bottleneck" if self.access_is_bottleneck else "not the bottleneck"
        text = (f"{len(self.replicas)} replicas at {rates} Mbit/s, round trips {rtts} ms, access "
                f"{self.access_mbit:.0f} Mbit/s ({bottleneck})")
        if self.event is not None:
            what = "dies" if self.event.kind == "die" else f"slows to {self.event.factor:.0%}"
            text += f"; {self.event.replica} {what} at {self.event.at_fraction:.0%} of the limit's time"
        return text

    def to_toml(self) -> str:
        """The testbed topology, in the layout of deploy/topologies/replicas.toml."""
        lines = [f"# {self.describe()}", f'name = "{self.name}"', "", "[defaults]", f'window = "{WINDOW}"',
                 'congestion = "cubic"', "", f"[hosts.{CLIENT}]", f"[hosts.{EDGE}]"]
        lines += [f"[hosts.{r.name}]" for r in self.replicas]
        links = [(CLIENT, EDGE, self.access_delay_ms, self.access_mbit)]
        links += [(EDGE, r.name, r.delay_ms, r.rate_mbit) for r in self.replicas]
        for a, b, delay, rate in links:
            lines += ["", "[[links]]", f'a = "{a}"', f'b = "{b}"', f"delay_ms = {delay!r}", f"rate_mbit = {rate!r}"]
        return "\n".join(lines) + "\n"

    def topology(self) -> Topology:
        return Topology.parse(self.to_toml(), default_name=self.name)


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _rounded(value: float, places: int = 3) -> float:
    """Rounded so that the TOML, the JSON and the emulator all see the same number."""
    return round(value, places)


def replica_set(seed: int, index: int) -> ReplicaSet:
    """The ``index``-th replica set of ``seed``: its kind and whether the access link is the bottleneck by the
    index (so any 6 consecutive indices cover every pair), everything else drawn."""
    rng = random.Random(f"lnet-replica-set:{seed}:{index}")
    kind = KINDS[index % len(KINDS)]
    access_bottleneck = (index // len(KINDS)) % 2 == 1
    n = rng.randint(MIN_REPLICAS, MAX_REPLICAS)
    high = min(REPLICA_MBIT[1], SUM_MBIT[1] / n)
    rates = [_log_uniform(rng, REPLICA_MBIT[0], high) for _ in range(n)]
    if sum(rates) < SUM_MBIT[0]:
        rates = [rate * SUM_MBIT[0] / sum(rates) for rate in rates]
    rates = [_rounded(rate) for rate in rates]
    delays = [_rounded(_log_uniform(rng, *REPLICA_DELAY_MS)) for _ in range(n)]
    replicas = tuple(Replica(f"r{i + 1}", rate, delay) for i, (rate, delay) in enumerate(zip(rates, delays,
                                                                                              strict=True)))
    share = rng.uniform(*(ACCESS_BOTTLENECK if access_bottleneck else ACCESS_HEADROOM))
    access = _rounded(sum(rates) * share)
    access_delay = _rounded(rng.uniform(*ACCESS_DELAY_MS))
    event = None
    if kind != "steady":
        who = rng.choice(replicas).name
        at = _rounded(rng.uniform(*CHANGE_AT))
        factor = _rounded(_log_uniform(rng, *SLOW_FACTOR)) if kind == "slow" else 0.0
        event = ReplicaEvent(kind, who, at, factor)
    return ReplicaSet(seed, index, access, access_delay, replicas, event)
