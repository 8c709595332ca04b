"""The replica options (``--strategy``, ``--tail``, ``--chunk``, ...) that ``lnet-get URL ...`` and
``lnet-send --source`` share: the argument group, its help, its typed options (``ReplicaArgs``) and the planner's
configuration they give.

Loaded before parsing, so it must stay light: argparse and the pure chunk planner's constants only (platformdirs
when the default history file is wanted).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lnet.client.engines.chunks import STRATEGIES, TAILS, PlanConfig
from lnet.client.wire.range_request import is_url
from lnet.units import parse_size

__all__ = ["EPILOG", "ReplicaArgs", "add_arguments", "history_path", "is_url"]

MAX_DEPTH = 16  # --depth: more outstanding requests than this only queue at the server


def history_path() -> Path:
    """Where replica throughputs are remembered between runs (``--history``'s default)."""
    import platformdirs

    return platformdirs.user_cache_path("lnet") / "replicas.json"


EPILOG = """\
replicas (lnet-get URL URL ... -o OUT):
  Every replica gets one persistent connection; byte ranges are pipelined on it, sized by --strategy:
    mdtp        (default) a uniform first chunk each, then chunks proportional to each replica's measured
                throughput so that every round ends together (the MDTP paper)
    static      equal chunks (--chunk, default 4MiB), the next to whoever has room
    brute       size / n to each replica, once          history  shares from remembered throughputs
    aggressive  equal chunks; doubled for a replica beating the fastest so far, none for one far behind
  --tail: when a replica is idle and nothing is left, split the largest remainder (default) or hedge it.
  Replicas must serve the same bytes: one whose length, ETag or Last-Modified differs is refused.

examples:
  lnet-get https://a.example/data.h5 https://b.example/data.h5 https://c.example/data.h5 -o data.h5
  lnet-get URL1 URL2 -o data.h5 --sha256 9f86d08...   # check the whole file too
  lnet-get URL1 URL2 -o data.h5 --json                # one JSON object with the per-replica table
"""


def add_arguments(p: argparse.ArgumentParser, title: str = "replicas (URL mode)") -> None:
    g = p.add_argument_group(title)
    g.add_argument("--strategy", choices=STRATEGIES, default="mdtp", help="how ranges are sized (default mdtp)")
    g.add_argument("--tail", choices=TAILS, default="split", help="the tail rule (default split)")
    g.add_argument("--depth", type=_depth, default=PlanConfig.depth, metavar="N",
                   help=f"requests outstanding per replica on its connection (default {PlanConfig.depth}; mdtp "
                   "gives one more to a replica whose round trip is over a third of a round)")
    g.add_argument("--chunk", metavar="SIZE", help="mdtp: the fastest replica's chunk (default: 1/16 of the "
                   "expected time, 1-8 s of it); static, aggressive: the equal chunk (default 4MiB)")
    g.add_argument("--initial-chunk", default="1MiB", metavar="SIZE", help="mdtp: the uniform first chunk (1MiB)")
    g.add_argument("--sha256", metavar="HEX", help="the whole file's SHA-256: the download fails if it differs")
    g.add_argument("--ignore-validators", action="store_true",
                   help="compare only lengths, not ETag/Last-Modified (mirrors running different servers); "
                   "use with --sha256")
    g.add_argument("--history", type=Path, metavar="FILE",
                   help=f"replica throughputs remembered between runs (default {history_path()})")


@dataclass(frozen=True)
class ReplicaArgs:
    """The options ``add_arguments`` adds, parsed (fields named as the flags)."""

    strategy: str
    tail: str
    chunk: str | None
    initial_chunk: str
    sha256: str | None
    ignore_validators: bool
    history: Path | None
    depth: int

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> ReplicaArgs:
        return cls(ns.strategy, ns.tail, ns.chunk, ns.initial_chunk, ns.sha256, ns.ignore_validators, ns.history,
                   ns.depth)

    def plan_config(self, timeout_s: float) -> PlanConfig:
        """The planner's configuration; a replica stalls after ``timeout_s``. Raises ``ValueError`` on a bad size."""
        chunk = parse_size(self.chunk) if self.chunk else None
        changes: dict[str, Any] = {"strategy": self.strategy, "tail": self.tail, "depth": self.depth,
                                   "stall_s": timeout_s, "initial_chunk": parse_size(self.initial_chunk)}
        if chunk is not None:
            changes["large_chunk" if self.strategy == "mdtp" else "static_chunk"] = chunk
        return PlanConfig(**changes)

    def history_file(self) -> Path:
        """``--history``, or where replica throughputs are remembered by default."""
        return self.history if self.history is not None else history_path()


def _depth(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_DEPTH:
        raise argparse.ArgumentTypeError(f"want a whole number from 1 to {MAX_DEPTH}, not {text!r}")
    return int(text)
