"""Render the benchmark results in bench/results/*.json into docs/results.md.

Measurements live as data: each benchmark writes a JSON file with its command, commit and every run's figures, and
this script turns the files into one page, so that the page never says more than the files do. The benchmarks'
formats differ; each kind this script knows gets a section of its own (command, commit, machine, date, and the
figures: medians with their spread where there were several runs), and any file it does not know is listed by
name at the end, never dropped. Files transcribed from older prose (``"source"``) say so.

    python bench/render_results.py            # rewrite docs/results.md
    python bench/render_results.py --check    # exit 1 if docs/results.md is not what the files give

It must not run a benchmark or read anything but bench/results/*.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lnet.units import format_size

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "docs" / "results.md"

Doc = dict[str, Any]

# the order of the sections, and what each benchmark is
BENCHES = {
    "demo": "`./run demo`: the main job, 96 MiB from ORNL to Sunnyvale on the emulated Abilene",
    "depot_throughput": "`bench/depot_throughput.py`: the depot on loopback against raw TCP",
    "pathchoice": "`bench/pathchoice.py`: path choice on the namespace testbed (docs/scheduler.md)",
    "multipath": "`bench/multipath.py`: one transfer over several disjoint chains on the testbed",
    "agreement": "`bench/agreement.py`: the simulator against saved testbed runs, and the testbed against itself",
    "rtt_sharing": "`bench/rtt_sharing.py`: how streams of different round trips share a full link on the testbed, "
                   "against the simulator's model",
    "scheduler": "`bench/scheduler.py`: the scheduler in the simulator",
    "multisource": "`bench/multisource.py`: lnet-get from several replicas against aria2 (docs/client.md)",
    "follow": "`bench/follow.py`: a receiver draining the destination (`--follow`) against a send alone",
    "get_startup": "`bench/get_startup.py`: how soon lnet-get's first connection and request go out",
    "part_commit": "`bench/part_commit.py`: committing a downloaded file (fsync and rename)",
    "small_files": "`bench/small_files.py`: a tree of small files (docs/client.md)",
    "directory": "`bench/directory_*.py`: the depot directory on etcd (docs/directory.md)",
    "trickle": "`bench/trickle.py`: a normal client beside hundreds of trickling clients (docs/depot.md)",
    "pinned_ab": "`bench/pinned_ab.py`: lnet-send pinned to testbed paths, two versions of lnet in turn",
}

_STAMP = re.compile(r"(?<!\d)(\d{8})-(\d{6})(?!\d)")


def fmt(value: Any, digits: int = 2) -> str:
    """A figure as the page shows it: numbers rounded, nothing (None) as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def spread(values: Iterable[Any], digits: int = 2) -> str:
    """`median (least-most), n` over the numbers among values."""
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        return "-"
    if len(numbers) == 1:
        return fmt(float(numbers[0]), digits)
    median = statistics.median(numbers)
    return f"{median:.{digits}f} ({min(numbers):.{digits}f}-{max(numbers):.{digits}f}), n={len(numbers)}"


def md_table(columns: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return fmt(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def date_of(name: str, doc: Doc) -> str:
    """The date a file records, else the stamp in its name (benchmarks name files NAME-YYYYMMDD-HHMMSS.json)."""
    for key in ("date", "started"):
        if isinstance(doc.get(key), str):
            return str(doc[key])
    stamp = _STAMP.search(name)
    if stamp:
        day, time = stamp.groups()
        return f"{day[:4]}-{day[4:6]}-{day[6:]} {time[:2]}:{time[2:4]}:{time[4:]}"
    return "not recorded"


def machine_of(machine: Any) -> str:
    """A benchmark's record of its machine (text, or a dict of its facts) as one line."""
    if machine is None:
        return "not recorded"
    if not isinstance(machine, dict):
        return str(machine)
    parts = []
    for key, value in machine.items():
        if isinstance(value, list):
            value = "/".join(fmt(v) for v in value)
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        parts.append(f"{key} {fmt(value)}")
    return "; ".join(parts)


def provenance(name: str, doc: Doc, commit: Any = None) -> list[str]:
    lines = [f"- file: `bench/results/{name}`"]
    lines.append(f"- command: `{doc.get('command', 'not recorded')}`")
    lines.append(f"- commit: {commit or doc.get('commit', 'not recorded')}")
    lines.append(f"- machine: {machine_of(doc.get('machine'))}")
    lines.append(f"- date: {date_of(name, doc)}")
    if doc.get("source"):
        lines.append(f"- source: {doc['source']}")
    if doc.get("settings"):
        lines.append(f"- settings: {doc['settings']}")
    if doc.get("caveat"):  # added to the file by hand after the run: what its figures do not show
        lines.append(f"- caveat: {doc['caveat']}")
    return lines


# --- the kinds


def render_transcribed(name: str, doc: Doc) -> list[str]:
    """The generic format (``"format": "lnet-results/1"``): runs with named figures, or tables as measured."""
    lines = [f"#### {doc.get('title', name)}", "", *provenance(name, doc), ""]
    runs = doc.get("runs")
    if runs:
        figures = list(doc.get("figures", []))
        for figure in figures:
            lines.append(f"- {figure}: {spread(run.get(figure) for run in runs)}")
        lines.append("")
        columns = ["run", "commit", *figures, "note"]
        rows = [[i, run.get("commit"), *(run.get(f) for f in figures), run.get("note")] for i, run in
                enumerate(runs, 1)]
        lines += [*md_table(columns, rows), ""]
    for table in doc.get("tables", []):
        lines += [f"*{table['caption']}*", "", *md_table(table["columns"], table["rows"]), ""]
    for key in ("spread", "targets", "notes"):
        if doc.get(key):
            lines += [f"{key.capitalize()}: {doc[key]}", ""]
    return lines


def render_follow(name: str, doc: Doc) -> list[str]:
    lines = [f"#### A receiver draining the destination ({date_of(name, doc)})", "", *provenance(name, doc), ""]
    rows = []
    for half in ("loopback", "testbed"):
        part = doc.get(half)
        if not isinstance(part, dict):
            continue
        alone = [r.get("seconds") for r in part.get("alone_s", [])]
        follow = [r.get("seconds") for r in part.get("follow_s", [])]
        identical = all(r.get("identical") for r in part.get("follow_s", []))
        rows.append([half, spread(alone), spread(follow), part.get("ratio"), part.get("target"), part.get("met"),
                     identical])
    columns = ["network", "send alone, s", "send with a receiver, s", "alone / follow (medians)", "target", "met",
               "bytes identical"]
    return [*lines, *md_table(columns, rows), ""]


def render_scheduler_random(name: str, doc: Doc) -> list[str]:
    config = doc.get("config", {})
    switches = ", ".join(f"{k}={v}" for k, v in config.items())
    rules = ", ".join(f"{rule} {'on' if config[rule] else 'off'}" for rule in ("deep_probes", "cold_scouts")
                      if rule in config)
    if "scout_after_s" in config:
        after = config["scout_after_s"]
        rules += ", scouts wait for the first path" if after is None else f", scouts after {after:g} s at most"
    if "peer_rtts" in config:
        rules += ", the depots' round trips" if config["peer_rtts"] else ", the client's round trips only"
    title = f"Random scenarios in the simulator, seed {doc.get('seed')}, {doc.get('scenarios')} scenarios"
    if isinstance(doc.get("cold_s"), int | float) and isinstance(doc.get("warm_s"), int | float):
        title += f", cold {doc['cold_s']:g} s and warm {doc['warm_s']:g} s"
    if config.get("block_bytes"):
        title += f", a sample a {format_size(int(config['block_bytes']))} block"
    lines = [f"#### {title}" + (f" ({rules})" if rules else ""), "",
             *provenance(name, doc), f"- configuration: {switches}", ""]
    kinds = doc.get("summary", {}).get("kinds", {})
    rows = [[kind, k.get("n"), k.get("warm_median"), k.get("warm_p10"), k.get("cold_median"), k.get("cold_p10"),
             k.get("warm_over_direct_min"), k.get("warm_over_routes_median"), k.get("cold_over_routes_median")]
            for kind, k in kinds.items()]
    columns = ["kind", "n", "warm/oracle median", "warm 10th pct", "cold/oracle median", "cold 10th pct",
               "warm/direct least", "warm/routes median", "cold/routes median"]
    lines += [*md_table(columns, rows), ""]
    to_90 = doc.get("summary", {}).get("to_90", {})
    if to_90:
        rows = [[size, t.get("n"), t.get("median_s"), t.get("max_s"), t.get("never")] for size, t in to_90.items()]
        lines += ["*cold start to 90% of the best path, simulated seconds*", "",
                  *md_table(["depots", "n", "median", "most", "never"], rows), ""]
    return lines


def render_pathchoice_random(name: str, doc: Doc) -> list[str]:
    title = (f"Random scenarios on the testbed, seed {doc.get('seed')}, {len(doc.get('scenarios', []))} scenarios, "
             f"at {doc.get('commit')} ({date_of(name, doc)})")
    lines = [f"#### {title}", "", *provenance(name, doc),
             f"- settings: block {doc.get('block')}, in flight {doc.get('inflight')}, max paths "
             f"{doc.get('max_paths')}, runs {doc.get('runs')}, quick {fmt(doc.get('quick'))}, "
             f"{fmt(doc.get('minutes'), 1)} minutes", ""]
    rows = []
    for ratio, sides in doc.get("summary", {}).items():
        testbed, sim = sides.get("testbed", {}), sides.get("sim", {})
        rows.append([ratio, testbed.get("n"), testbed.get("median"), testbed.get("p10"), sim.get("median"),
                     sim.get("p10")])
    columns = ["ratio", "n", "testbed median", "testbed 10th pct", "simulator median", "simulator 10th pct"]
    return [*lines, *md_table(columns, rows), ""]


def render_agreement(name: str, doc: Doc) -> list[str]:
    """bench/agreement.py's record: per benchmark and ratio, the pairs, the mean distance and the median gap."""
    lines = [f"#### The simulator against {len(doc.get('files', []))} testbed runs, at {doc.get('commit')} "
             f"({date_of(name, doc)})", "", *provenance(name, doc),
             f"- testbed runs: {', '.join(doc.get('files', []))}", ""]
    rows = []
    for bench, ratios in doc.get("figures", {}).items():
        for ratio, entry in ratios.items():
            rows.append([bench, ratio, entry.get("n"), entry.get("mean_distance"), entry.get("median_gap")])
    lines += [*md_table(["benchmark", "ratio", "pairs", "mean distance", "median gap (testbed - simulator)"], rows), ""]
    noise = doc.get("pinned_noise")
    if noise:
        lines += [f"The testbed against itself: {noise['pairs']} pairs of pinned runs of {noise['paths']} paths, the "
                  f"slower over the faster: median {fmt(noise['median'])}, 10th percentile {fmt(noise['p10'])}, "
                  f"least {fmt(noise['least'])}.", ""]
    return lines


def render_rtt_sharing(name: str, doc: Doc) -> list[str]:
    """bench/rtt_sharing.py's record: each contested link, the parts its edges got, the simulator's by bias."""
    lines = [f"#### Seed {doc.get('seed')}, {doc.get('streams')} streams an edge, at {doc.get('commit')} "
             f"({date_of(name, doc)})", "", *provenance(name, doc), ""]
    biases = list(doc.get("mean_distance", {}))
    rows = []
    for row in doc.get("scenarios", []):
        edges = row.get("edges", [])
        rows.append([f"{row.get('scenario')} ({row.get('kind')})", f"{row.get('link')} {fmt(row.get('link_mbit'), 1)}",
                     ", ".join(f"{'>'.join(e['edge'])} {fmt(e['rtt_ms'], 0)} ms" for e in edges),
                     " / ".join(fmt(e["part"]) for e in edges),
                     *(" / ".join(fmt(p) for p in row.get("simulated_parts", {}).get(b, [])) for b in biases)])
    lines += [*md_table(["scenario", "link, Mbit/s", "edges, round trips", "testbed parts",
                         *(f"bias {b}" for b in biases)], rows), ""]
    lines += ["Mean distance between the testbed's parts and the simulator's: "
              + ", ".join(f"bias {b} {fmt(d, 3)}" for b, d in doc.get("mean_distance", {}).items())
              + f"; nearest {doc.get('nearest_bias')}.", ""]
    return lines


def render_multisource_random(name: str, doc: Doc) -> list[str]:
    commit = doc.get("tools", {}).get("lnet_commit")
    lines = [f"#### Random replica sets, seed {doc.get('seed')}, {len(doc.get('sets', []))} sets", "",
             *provenance(name, doc, commit=commit),
             f"- settings: sizes {doc.get('sizes')}, {doc.get('runs_each')} runs each, competitors "
             f"{', '.join(doc.get('competitors', []))}; rerun: `{doc.get('rerun')}`", ""]
    rows = []
    for size, ratios in doc.get("summary", {}).items():
        for ratio, s in ratios.items():
            rows.append([size, ratio, s.get("n"), s.get("median"), s.get("p10"), s.get("min"), s.get("max")])
    lines += [*md_table(["size", "ratio", "n", "median", "10th pct", "least", "most"], rows), ""]
    targets = [[t.get("target"), t.get("value"), t.get("met")] for t in doc.get("targets", [])]
    if targets:
        lines += [*md_table(["target", "value", "met"], targets), ""]
    return lines


def render_depot_throughput(name: str, doc: Doc) -> list[str]:
    """bench/depot_throughput.py's record: every run's rate per path (bytes/s) and CPU per GiB."""
    runs = [run for run in doc.get("runs", []) if isinstance(run.get("rates"), dict)]
    block = doc.get("block_bytes")
    title = f"Depot throughput on loopback, {block // 2**20 if isinstance(block, int) else '?'} MiB blocks"
    lines = [f"#### {title} ({date_of(name, doc)})", "", *provenance(name, doc),
             f"- settings: {doc.get('total_bytes', 0) // 2**20} MiB per path, {len(runs)} runs, fast path "
             f"{fmt(doc.get('fast_path'))}", ""]
    paths = list(dict.fromkeys(path for run in runs for path in run["rates"]))
    rows = []
    for path in paths:
        rates = [run["rates"][path] / 1e6 for run in runs if path in run["rates"]]
        shares = [run["rates"][path] / run["rates"]["raw TCP"] for run in runs
                  if path in run["rates"] and run["rates"].get("raw TCP")]
        cpu = [run.get("cpu_s_per_GiB", {}).get(path) for run in runs]
        # each path's CPU is (the depots', the client's) seconds per GiB
        depot_cpu = [c[0] for c in cpu if isinstance(c, list) and len(c) == 2]
        client_cpu = [c[1] for c in cpu if isinstance(c, list) and len(c) == 2]
        rows.append([path, spread(rates, 0), spread(shares), spread(depot_cpu), spread(client_cpu)])
    columns = ["path", "MB/s, median (range)", "share of the run's raw TCP", "depots' CPU-s/GiB", "client's CPU-s/GiB"]
    return [*lines, *md_table(columns, rows), ""]


def render_pinned_ab(name: str, doc: Doc) -> list[str]:
    """bench/pinned_ab.py's record: each path's Mbit/s under side A and side B, run by run."""
    lines = [f"#### Pinned paths, A against B ({date_of(name, doc)})", "", *provenance(name, doc),
             f"- sides: {doc.get('sides')}", ""]
    runs = [run for run in doc.get("runs", []) if isinstance(run, dict)]
    rows = []
    for key in dict.fromkeys((run["seed"], run["index"], run["path"]) for run in runs):
        def rates(side: str, key: tuple[Any, ...] = key) -> list[Any]:
            return [run["mbps"] for run in runs if (run["seed"], run["index"], run["path"]) == key
                    and run["side"] == side and run["ok"]]
        a, b = rates("A"), rates("B")
        b_over_a = statistics.median(b) / statistics.median(a) if a and b else None
        rows.append([f"{key[0]} r{key[1]:03d} {key[2]}", spread(a), spread(b), fmt(b_over_a)])
    columns = ["scenario, path", "A: Mbit/s, median (range)", "B", "B / A, medians"]
    return [*lines, *md_table(columns, rows), ""]


def render_runs(name: str, doc: Doc) -> list[str]:
    """A benchmark that records only its command and every run's figures (numbers by name)."""
    lines = [f"#### `{doc.get('command')}` ({date_of(name, doc)})", "", *provenance(name, doc), ""]
    runs = [run for run in doc["runs"] if isinstance(run, dict)]
    keys = list(dict.fromkeys(key for run in runs for key in run))
    rows = [[key, spread(run.get(key) for run in runs)] for key in keys]
    return [*lines, *md_table(["figure", "median (range), runs"], rows), ""]


Renderer = Callable[[str, Doc], list[str]]


def kind_of(doc: Doc) -> tuple[str, Renderer] | None:
    """Which benchmark a file belongs to and how to render it; None for a format this script does not know."""
    if doc.get("format") == "lnet-results/1" and doc.get("bench") in BENCHES:
        return str(doc["bench"]), render_transcribed
    bench = doc.get("bench")
    if bench == "scheduler-random" and "summary" in doc:
        return "scheduler", render_scheduler_random
    if bench == "pathchoice" and "warm_over_oracle" in doc.get("summary", {}):
        return "pathchoice", render_pathchoice_random
    if bench == "multipath" and "multi_over_sum" in doc.get("summary", {}):
        return "multipath", render_pathchoice_random  # the same shape: each ratio on the testbed and simulated
    if bench == "agreement" and isinstance(doc.get("figures"), dict):
        return "agreement", render_agreement
    if bench == "rtt_sharing" and isinstance(doc.get("scenarios"), list):
        return "rtt_sharing", render_rtt_sharing
    if bench == "multisource-random" and "summary" in doc:
        return "multisource", render_multisource_random
    if "follow" in str(doc.get("command", "")) and isinstance(doc.get("loopback"), dict):
        return "follow", render_follow
    if bench == "depot_throughput" and isinstance(doc.get("runs"), list):
        return "depot_throughput", render_depot_throughput
    if "bench/directory_" in str(doc.get("command", "")) and isinstance(doc.get("runs"), list):
        return "directory", render_runs
    if bench == "trickle" and isinstance(doc.get("runs"), list):
        return "trickle", render_runs
    if bench == "pinned_ab" and isinstance(doc.get("runs"), list):
        return "pinned_ab", render_pinned_ab
    return None


def result_files(results: Path = RESULTS) -> list[Path]:
    """The committed JSON results (staged ones included): a benchmark run here writes its file beside them, and
    the page says what the repository holds until that file is added (``git add -f``). Outside a git work tree,
    every file there."""
    try:
        listed = subprocess.run(["git", "-C", str(results), "ls-files", "--", "*.json"], capture_output=True,
                                text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return sorted(results.glob("*.json"))
    return sorted(results / name for name in listed.splitlines() if "/" not in name and (results / name).exists())


def render(results: Path = RESULTS) -> str:
    sections: dict[str, list[tuple[str, str, Doc, Renderer]]] = {bench: [] for bench in BENCHES}
    unknown: list[str] = []
    for path in result_files(results):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            unknown.append(f"`bench/results/{path.name}`: unreadable ({error})")
            continue
        kind = kind_of(doc) if isinstance(doc, dict) else None
        if kind is None:
            unknown.append(f"`bench/results/{path.name}`: a format this page does not render")
            continue
        bench, renderer = kind
        sections[bench].append((date_of(path.name, doc), path.name, doc, renderer))

    lines = [
        "# Measured results",
        "",
        "<!-- Generated by bench/render_results.py from bench/results/*.json: edit those, not this page. -->",
        "",
        "Every figure here is in a JSON file under `bench/results/` with the command that produced it; the CDF",
        "plots the random-scenario benchmarks draw are beside them (`.png`). Benchmarks on the testbed run under",
        "`flock /tmp/lnet-testbed.lock`, so that no two share the machine. Machines differ by more than most",
        "changes do: compare figures from one machine only. Files marked as transcribed hold run logs once",
        "written out in the README and the docs; their commit is where the runs were made.",
        "",
    ]
    for bench, entries in sections.items():
        if not entries:
            continue
        lines += [f"## {bench}", "", BENCHES[bench] + ".", ""]
        for _, name, doc, renderer in sorted(entries, key=lambda e: (e[0], e[1])):
            lines += renderer(name, doc)
    if unknown:
        lines += ["## Not rendered", "", *(f"- {u}" for u in unknown), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not what the files give")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the directory of JSON results")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write (default docs/results.md)")
    args = parser.parse_args(argv)
    page = render(args.results)
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is out of date: run python bench/render_results.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
