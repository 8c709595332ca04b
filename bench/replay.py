"""Replay an lnet-send trace through the scheduler of this version: the same events, in the same order, at the same
times, and each decision the run recorded beside the one this scheduler takes.

    .venv/bin/python bench/replay.py TRACE.jsonl [--all] [--json] [--no-fill-rule] [--route-blame | --no-route-blame]

The scheduler is a pure function of what it is told (measurements, probe ends, failures) and when it is asked
(ticks): given a run's trace (``lnet-send --trace``, which ``bench/pathchoice.py`` and ``bench/multipath.py`` keep
for every run), this rebuilds the run's scheduler from the trace's first record (its ends, candidates, settings,
round trips, and the memory it began from with the clock that memory is dated on) and feeds it the recorded
events. Where the code is the run's, every decision comes out the same, so a testbed run can be read decision by
decision on this machine; where a rule changed, the first decision that differs shows what the new rule would
have done at that point of a real run. After it the run went on with the old decision and the replay's scheduler
would have gone on with the new one: later lines compare nothing (``--all`` prints them anyway, marked).

Exact up to the trace's rounding (times to the millisecond, a measurement's seconds to 0.1 ms): a figure that
lands on a threshold may tip the other way. Ticks that changed nothing and asked for no probe are not in the trace
and are not replayed; they decide nothing. Exit status: 0 every decision the same, 1 one differs, 2 the trace
cannot be replayed (from a version that did not record its settings and memory, or of a pinned path).

``--no-fill-rule`` replays without the bytes left the run's scheduler was told (``left_bytes``, fed as
``Progress``): the first decision that differs is where that rule changed the run (docs/decisions/0020).
``--no-route-blame`` replays a run whose trials blamed a loss on the newcomers the round trips place on the set's
links without that rule, and ``--route-blame`` a run from before it with it (docs/decisions/0022); a trace that
does not say replays as its run ran (without the rule, if from before it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lnet.scheduler import Decision as SchedulerDecision
from lnet.scheduler import (
    DepotFailure,
    DropDepot,
    EdgeMemory,
    HopFailure,
    Measurement,
    PathScheduler,
    ProbeDone,
    Progress,
    SchedulerConfig,
)

__all__ = ["ReplayError", "Step", "main", "replay"]


class ReplayError(ValueError):
    """The trace cannot be replayed: what is missing, in a sentence."""


@dataclass(frozen=True)
class Step:
    """One recorded decision and the replay's at the same point: each as ``[kind, reason, paths, probes]``."""

    t: float
    recorded: list[Any]
    replayed: list[Any]

    @property
    def same(self) -> bool:
        return self.recorded == self.replayed


def replay(
    records: Iterable[dict[str, Any]], *, fill_rule: bool = True, route_blame: bool | None = None
) -> list[Step]:
    """Every decision of a run's trace beside this scheduler's, until the end of the trace; without the bytes left
    unless ``fill_rule``; with ``route_blame`` on or off as given (None: as the run had it, off in a trace from
    before the rule)."""
    records = list(records)
    first = next((r for r in records if r.get("kind") == "decision"), {})
    if first.get("reason") != "start":
        raise ReplayError("no start decision: the trace of a transfer that did not run, or of a pinned path")
    needed = ("src", "dst", "vertices", "config", "clock_s", "memory", "memory_smoothing_s")
    missing = [key for key in needed if key not in first]
    if missing:
        raise ReplayError(f"the trace's start record has no {', '.join(missing)}: a trace of an earlier lnet-send")
    try:
        settings = {"route_blame": False, **first["config"]}  # a run from before the rule ran without it
        if route_blame is not None:
            settings["route_blame"] = route_blame
        config = SchedulerConfig(**settings)
    except TypeError as exc:
        raise ReplayError(f"settings this version does not know: {exc}") from None
    try:
        memory = EdgeMemory.from_document(first["memory"], smoothing_s=first["memory_smoothing_s"])
    except (ValueError, TypeError, KeyError) as exc:
        raise ReplayError(f"the memory the run began from cannot be read: {exc}") from None
    clock = float(first["clock_s"])  # the events' times are seconds since the start; the memory's, the clock's
    scheduler = PathScheduler(
        first["vertices"], first["src"], first["dst"], memory, config,
        rtt_s={v: ms / 1000 for v, ms in first.get("rtt_ms", {}).items()},
        peer_rtt_s={_edge(pair): ms / 1000 for pair, ms in first.get("peer_rtt_ms", {}).items()},
    )
    steps: list[Step] = []
    for record in records:
        kind, t = record.get("kind"), clock + float(record.get("t", 0.0))
        if kind == "measure":
            began = None if record["began"] is None else clock + record["began"]
            scheduler.measure(Measurement(tuple(record["edge"]), record["bytes"], record["seconds"], t,
                                          record["streams"], began, record.get("starved", False)))
        elif kind == "probe-done":
            scheduler.measure(ProbeDone(tuple(record["edge"]), t))
        elif kind == "failure":
            if "depot" in record:
                scheduler.measure(DepotFailure(record["depot"], t))
            else:
                scheduler.measure(HopFailure(tuple(record["edge"]), t))
        elif kind == "decision":
            if fill_rule and record.get("left_bytes") is not None:  # the bytes left its scheduler was told
                scheduler.measure(Progress(int(record["left_bytes"]), t))
            decision = scheduler.start(t) if record is first else scheduler.tick(t)
            steps.append(Step(round(t - clock, 3), _recorded(record), _replayed(decision)))
    return steps


def _edge(pair: str) -> tuple[str, str]:
    u, _, v = pair.partition(">")
    return u, v


def _recorded(record: dict[str, Any]) -> list[Any]:
    return [record["decision"], record.get("reason", ""), record["paths"], record["probes"]]


def _replayed(decision: SchedulerDecision) -> list[Any]:
    probes = [] if isinstance(decision, DropDepot) else [list(e) for e in decision.probes]
    return [type(decision).__name__, getattr(decision, "reason", ""), [list(p) for p in decision.all_paths], probes]


def _show(step: list[Any]) -> str:
    kind, reason, paths, probes = step
    chains = " + ".join(",".join(p[1:-1]) or "direct" for p in paths)
    asked = f" probes {', '.join('>'.join(e) for e in probes)}" if probes else ""
    return f"{kind}{' ' + reason if reason else ''} [{chains}]{asked}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="an lnet-send --trace file (JSON lines)")
    parser.add_argument("--all", action="store_true", help="go on past the first decision that differs")
    parser.add_argument("--json", action="store_true", help="print the steps as JSON")
    parser.add_argument("--no-fill-rule", action="store_true",
                        help="replay without the bytes left the run was told: where the fill rule changed the run")
    guess = parser.add_mutually_exclusive_group()
    guess.add_argument("--route-blame", dest="route_blame", action="store_const", const=True,
                       help="replay with a trial's loss blamed on the newcomers on the set's links (decisions/0022)")
    guess.add_argument("--no-route-blame", dest="route_blame", action="store_const", const=False,
                       help="replay without that rule: where it changed the run")
    args = parser.parse_args(argv)
    try:
        lines = args.trace.read_text(encoding="utf-8").splitlines()
        steps = replay((json.loads(line) for line in lines if line.strip()), fill_rule=not args.no_fill_rule,
                       route_blame=args.route_blame)
    except (OSError, json.JSONDecodeError, KeyError, ReplayError) as exc:
        print(f"replay: {args.trace}: {exc}", file=sys.stderr)
        return 2
    differs = next((i for i, step in enumerate(steps) if not step.same), None)
    if args.json:
        print(json.dumps({"trace": str(args.trace), "decisions": len(steps), "first_difference": differs,
                          "steps": [vars(step) for step in steps]}))
    else:
        for i, step in enumerate(steps):
            if differs is not None and i > differs and not args.all:
                break
            after = differs is not None and i > differs
            mark = "  (after the first difference: compares nothing)" if after else ""
            if step.same:
                print(f"{step.t:8.3f}  same      {_show(step.recorded)}{mark}")
            else:
                print(f"{step.t:8.3f}  recorded  {_show(step.recorded)}{mark}")
                print(f"{'':8}  replayed  {_show(step.replayed)}")
        total = f"{len(steps)} decisions"
        print(f"{total}: all the same" if differs is None
              else f"{total}: the first that differs is number {differs + 1}, at {steps[differs].t:.3f} s")
    return 0 if differs is None else 1


if __name__ == "__main__":
    sys.exit(main())
