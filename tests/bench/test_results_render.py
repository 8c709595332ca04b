"""docs/results.md is rendered from bench/results/*.json (bench/render_results.py) and must say what they say."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

from .benches import REPO, load_bench


def load_renderer() -> ModuleType:
    return load_bench("render_results")


def test_the_page_is_what_the_committed_results_give() -> None:
    renderer = load_renderer()
    page = (REPO / "docs" / "results.md").read_text()
    assert page == renderer.render(REPO / "bench" / "results"), (
        "docs/results.md is out of date: run python bench/render_results.py"
    )


def test_every_committed_result_is_of_a_kind_the_page_renders() -> None:
    renderer = load_renderer()
    unknown = [
        path.name
        for path in renderer.result_files(REPO / "bench" / "results")
        if renderer.kind_of(json.loads(path.read_text())) is None
    ]
    assert unknown == []


def test_the_readme_quotes_the_demo_figures_its_results_give() -> None:
    renderer = load_renderer()
    readme = (REPO / "README.md").read_text()
    cited = re.search(r"Every run's figures are in `bench/results/(demo-[^`]+\.json)`", readme)
    assert cited is not None, "the README names the file its demo figures come from"
    demo = json.loads((REPO / "bench" / "results" / cited.group(1)).read_text())
    assert demo["bench"] == "demo"
    assert demo["command"] in readme
    for figure in ("warm_mbps", "direct_mbps"):
        assert renderer.spread(run[figure] for run in demo["runs"]).split(", n=")[0] in readme, figure
    median, rest = renderer.spread(run["warm_over_direct"] for run in demo["runs"]).split(" ", 1)
    assert f"**{median}x** {rest.split(', n=')[0]}" in readme


def test_runs_are_given_as_median_and_spread_and_an_unknown_file_is_listed(tmp_path: Path) -> None:
    renderer = load_renderer()
    runs = {
        "format": "lnet-results/1",
        "bench": "demo",
        "title": "three runs",
        "command": "./run demo",
        "commit": "abc1234",
        "machine": "a test",
        "figures": ["ratio"],
        "runs": [{"commit": "abc1234", "ratio": r} for r in (1.5, 2.0, 1.75)],
    }
    (tmp_path / "demo-x.json").write_text(json.dumps(runs))
    (tmp_path / "other-20261128-010203.json").write_text(json.dumps({"bench": "something new"}))
    (tmp_path / "broken.json").write_text("{")
    page = renderer.render(tmp_path)
    assert "- ratio: 1.75 (1.50-2.00), n=3" in page
    assert "- command: `./run demo`" in page
    assert "- machine: a test" in page
    assert "`bench/results/other-20261128-010203.json`: a format this page does not render" in page
    assert "`bench/results/broken.json`: unreadable" in page


def test_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    renderer = load_renderer()
    (tmp_path / "r").mkdir()
    page = tmp_path / "results.md"
    page.write_text("stale\n")
    assert renderer.main(["--check", "--results", str(tmp_path / "r"), "--out", str(page)]) == 1
    assert renderer.main(["--results", str(tmp_path / "r"), "--out", str(page)]) == 0
    assert renderer.main(["--check", "--results", str(tmp_path / "r"), "--out", str(page)]) == 0


def test_a_file_without_a_date_is_dated_by_the_stamp_in_its_name_not_by_its_seed() -> None:
    renderer = load_renderer()
    assert renderer.date_of("pathchoice-random-3569156308-20261128-051458.json", {}) == "2026-11-28 05:14:58"
    assert renderer.date_of("x.json", {"date": "2026-11-26"}) == "2026-11-26"
    assert renderer.date_of("x.json", {}) == "not recorded"
