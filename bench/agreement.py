"""How far the simulator is from the testbed, over saved random runs of bench/pathchoice.py and bench/multipath.py.

Each saved scenario is simulated again with this version's simulator, at the run's settings and sizes (as
``bench/pathchoice.py --resimulate`` does), and each of its ratios is set beside the testbed's: for every ratio, the
pairs, the mean distance |testbed - simulator|, the median of testbed - simulator (above 0: the simulator is the
pessimist), and the same by kind of scenario. A change to the simulator's model is judged by this: it should bring
the two closer on the ratios the decision rules are judged by, not only on the scenario it was made for.

    .venv/bin/python bench/agreement.py RESULTS.json [RESULTS.json ...] [--caveat TEXT]

The figures are saved in bench/results/agreement-<time>.json with the commit and the files compared.

Compare runs made with the runtime code of this version (the scheduler and the relay decide the testbed's figures):
a run from an older scheduler says how far that scheduler was from today's simulator, not how good the model is.
One testbed run a scenario is noisy, and the script says how noisy: over every pair of pinned runs of one path (same
scenario, same size) in all the path-choice runs saved in bench/results (of any version: the scheduler does not
choose a pinned run's path), the slower over the faster. Read a change of a few hundredths in the mean distance
over a few dozen pairs as no change. Needs no root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import multipath as mp  # noqa: E402
import pathchoice as pc  # noqa: E402
import testbed_scenarios as ts  # noqa: E402

from lnet.scheduler.simulator import RTT_BIAS  # noqa: E402


def pathchoice_pairs(document: dict[str, Any], rtt_bias: float | None = None) -> list[dict[str, Any]]:
    """Each scenario's ratios on the testbed (as saved) and in this version's simulator (sharing full links with
    ``rtt_bias``; None: the model's own)."""
    settings = pc.saved_settings(document, int(document["max_paths"]))
    rows = []
    for row in document["scenarios"]:
        rc = ts.random_case(int(row["seed"]), int(row["index"]), rtt_bias)
        row = {**row, "sim_run": pc.simulate_random(rc, replace(settings, size=int(row["size"])))}
        sides = pc.random_figures(pc.case_of(rc), rc, row)
        rows.append({"kind": row["kind"], "name": rc.name, **sides})
    return rows


def multipath_pairs(document: dict[str, Any], rtt_bias: float | None = None) -> list[dict[str, Any]]:
    settings = pc.saved_settings(document)
    plan = mp.Plan(settings, tuple(document["max_paths"]))
    rows = []
    for row in document["scenarios"]:
        rc = ts.random_case(int(row["seed"]), int(row["index"]), rtt_bias)
        case = mp.random_multicase(rc, plan)
        sim = mp.simulate_random(rc, case, mp.Plan(replace(settings, size=int(row["size"])), plan.max_paths))
        rows.append({"kind": row["kind"], "name": rc.name, "testbed": row["testbed"],
                     "sim": mp.random_ratios(mp.figures_of(case, sim), disjoint=case.disjoint)})
    return rows


def pinned_noise(documents: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The testbed against itself: every pair of pinned runs of one path of one scenario at one size across
    ``documents`` (path-choice runs), the slower over the faster (None if no path was pinned twice)."""
    rates: dict[tuple[Any, ...], list[float]] = {}
    for document in documents:
        for row in document["scenarios"]:
            for run in row["widest"]:
                if run.get("ok") and run.get("mbps") and not run.get("stopped_s"):
                    key = (row["seed"], row["index"], tuple(run["path"]), row["size"])
                    rates.setdefault(key, []).append(run["mbps"])
    pairs = sorted(min(a, b) / max(a, b) for runs in rates.values()
                   for i, a in enumerate(runs) for b in runs[i + 1:])
    if not pairs:
        return None
    return {"paths": sum(len(runs) > 1 for runs in rates.values()), "pairs": len(pairs),
            "median": statistics.median(pairs), "p10": ts.p10(pairs), "least": pairs[0]}


def agreement(rows: Sequence[dict[str, Any]], ratios: Sequence[str]) -> dict[str, Any]:
    """Per ratio: pairs, mean |testbed - simulator|, median testbed - simulator, and by kind."""
    out: dict[str, Any] = {}
    for key in ratios:
        pairs = [(r["kind"], r["testbed"][key] - r["sim"][key]) for r in rows
                 if r["testbed"].get(key) is not None and r["sim"].get(key) is not None]
        if not pairs:
            continue
        kinds = {kind: [gap for k, gap in pairs if k == kind] for kind in dict.fromkeys(k for k, _ in pairs)}
        out[key] = {"n": len(pairs), "mean_distance": statistics.fmean(abs(gap) for _, gap in pairs),
                    "median_gap": statistics.median(gap for _, gap in pairs),
                    "by_kind": {kind: {"n": len(gaps), "mean_distance": statistics.fmean(abs(g) for g in gaps),
                                       "median_gap": statistics.median(gaps)} for kind, gaps in kinds.items()}}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path, help="saved random runs (pathchoice-random-*.json, "
                                                              "multipath-random-*.json)")
    parser.add_argument("--max-min", action="store_true",
                        help="the simulator shares full links max-min, every stream alike (the model before "
                        "2026-12-08, simulator.RTT_BIAS), to compare the two models")
    parser.add_argument("--caveat", help="saved with the figures: what was different about this run (an A/B's side)")
    args = parser.parse_args(argv)
    rows: dict[str, list[dict[str, Any]]] = {"pathchoice": [], "multipath": []}
    for path in args.results:
        try:
            document = json.loads(path.read_text())
            bench = document["bench"]
            bias = 0.0 if args.max_min else None
            rows[bench].extend(pathchoice_pairs(document, bias) if bench == "pathchoice"
                               else multipath_pairs(document, bias))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"cannot read a random pathchoice or multipath run in {path}: {exc}", file=sys.stderr)
            return 2
    figures = {"pathchoice": agreement(rows["pathchoice"], list(pc.RANDOM_RATIOS)),
               "multipath": agreement(rows["multipath"], list(mp.RANDOM_RATIOS))}
    labels = {**pc.RANDOM_RATIOS, **mp.RANDOM_RATIOS}
    print("testbed against this version's simulator: pairs, mean |testbed - simulator|, median testbed - simulator")
    for bench, by_ratio in figures.items():
        for key, entry in by_ratio.items():
            print(f"{bench:<10} {labels[key]:<30} n {entry['n']:>3}  distance {entry['mean_distance']:.3f}  "
                  f"gap {entry['median_gap']:+.3f}  "
                  + "  ".join(f"{kind} {e['mean_distance']:.2f}/{e['median_gap']:+.2f}"
                              for kind, e in entry["by_kind"].items()))
    saved = sorted(ts.RESULTS.glob("pathchoice-random-*.json"))
    noise = pinned_noise([json.loads(path.read_text()) for path in saved])
    if noise is not None:
        print(f"the testbed against itself: {noise['pairs']} pairs of pinned runs of {noise['paths']} paths, the "
              f"slower over the faster: median {noise['median']:.2f}, 10th percentile {noise['p10']:.2f}, least "
              f"{noise['least']:.2f}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = ts.RESULTS / f"agreement-{stamp}.json"
    document = {"bench": "agreement", "command": " ".join(["bench/agreement.py", *(argv or sys.argv[1:])]),
                "commit": pc.commit(), "files": [path.name for path in args.results], "figures": figures,
                "pinned_noise": noise, "rtt_bias": 0.0 if args.max_min else RTT_BIAS,
                **({"caveat": args.caveat} if args.caveat else {})}
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
