"""The transfer report: round trip, validation, the attempts table, the plot, and ``lnet report``."""

from __future__ import annotations

import builtins
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lnet.client.commands import cli
from lnet.client.exits import ExitCode
from lnet.client.formats.report import (
    EdgeRate,
    PathAttempt,
    PlotUnavailable,
    RateWindow,
    Report,
    ReportError,
    TimelinePoint,
    attempts_table,
    edges_table,
    figure,
    first_reaching,
    load,
    plot,
    short_path,
    windowed_rates,
)

COLD_START = Report(  # the first, third and last rows of the seed's Table 1, with made-up times
    file="abilene.bin",
    size=256 * 1024 * 1024,
    seconds=300.0,
    path_attempts=(
        PathAttempt(("ORNL", "Sunnyvale"), 0.0, 20.0, 6_575_000, 2.63, "exploring"),
        PathAttempt(("ORNL", "Denver", "Sunnyvale"), 20.0, 45.5, 11_953_125, 3.75, "exploring"),
        PathAttempt(
            ("ORNL", "Atlanta", "Indianapolis", "Kansas City", "Denver", "Sunnyvale"), 45.5, 300.0, 190_527_331,
            5.99, "done",
        ),
    ),
    timeline=(
        TimelinePoint(0.0, 0, 0.0, ("ORNL", "Sunnyvale")),
        TimelinePoint(10.0, 3_287_500, 2.63, ("ORNL", "Sunnyvale")),
        TimelinePoint(30.0, 11_000_000, 3.7, ("ORNL", "Denver", "Sunnyvale")),
        TimelinePoint(300.0, 268_435_456, 5.99, ("ORNL", "Atlanta", "Indianapolis", "Kansas City", "Denver")),
    ),
    edges=(
        EdgeRate("ORNL", "Atlanta", 17.44, 40),
        EdgeRate("Denver", "Sunnyvale", 5.99, 38),
    ),
)


def render(table: Any) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(table)
    return console.export_text()


def test_a_saved_report_loads_back_equal(tmp_path: Path) -> None:
    COLD_START.save(tmp_path / "r.json")
    assert load(tmp_path / "r.json") == COLD_START
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["format"] == "lnet-report/1"
    assert document["path_attempts"][0] == {
        "path": ["ORNL", "Sunnyvale"], "start": 0.0, "end": 20.0, "bytes": 6_575_000, "mbps": 2.63,
        "reason": "exploring",
    }
    assert document["edges"][0] == {"from": "ORNL", "to": "Atlanta", "mbps": 17.44, "samples": 40}
    assert document["timeline"][1] == {"t": 10.0, "bytes": 3_287_500, "mbps": 2.63, "path": ["ORNL", "Sunnyvale"]}


def good() -> dict[str, Any]:
    return COLD_START.to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="lnet-report/0"), "format is 'lnet-report/0'"),
        (lambda d: d.pop("edges"), "lacks edges"),
        (lambda d: d.update(extra=1), "unknown fields: extra"),
        (lambda d: d.update(size=-1), "size is -1"),
        (lambda d: d.update(size=2**200), "size is a 201-bit number"),
        (lambda d: d.update(seconds="long"), "seconds must be a number, not str"),
        (lambda d: d["path_attempts"][1].update(end=1.0), r"path_attempts\[1\] ends at 1.0 before it starts at 20.0"),
        (lambda d: d["path_attempts"][0].update(path=[]), r"path_attempts\[0\]\.path must be a list of 1 to 256"),
        (lambda d: d["path_attempts"][0].update(path=["ORNL", 3]), r"path_attempts\[0\]\.path\[1\]"),
        (lambda d: d["path_attempts"][0].update(mbps=True), r"path_attempts\[0\]\.mbps must be a number"),
        (lambda d: d["path_attempts"][0].update(reason=None), r"path_attempts\[0\]\.reason must be a string"),
        (lambda d: d["timeline"][2].update(t=5.0), r"timeline\[2\] goes back in time"),
        (lambda d: d["timeline"][2].update(bytes=1), r"timeline\[2\] goes back in time or in bytes"),
        (lambda d: d["edges"][0].update(samples=1.5), r"edges\[0\]\.samples must be a whole number"),
        (lambda d: d.update(timeline={}), "timeline must be a list, not dict"),
    ],
)
def test_load_refuses(tmp_path: Path, change: Any, message: str) -> None:
    document = copy.deepcopy(good())
    change(document)
    (tmp_path / "r.json").write_text(json.dumps(document))
    with pytest.raises(ReportError, match=message):
        load(tmp_path / "r.json")


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"seconds": Infinity}', b"\xff"])
def test_load_refuses_what_is_not_a_report(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "r.json").write_bytes(content)
    with pytest.raises(ReportError, match="not JSON|must be an object"):
        load(tmp_path / "r.json")


def test_the_attempts_table_reads_like_the_seeds_table_1() -> None:
    lines = render(attempts_table(COLD_START)).splitlines()
    rows = [line for line in lines if "ORNL ->" in line]
    assert len(rows) == 3
    assert "ORNL -> Sunnyvale" in rows[0]
    assert rows[0].split("│")[3:5] == ["        20.00 ", "   2.63 "]
    assert "ORNL -> Atlanta -> Indianapolis -> Kansas City -> Denver -> Sunnyvale" in rows[2]
    assert "254.50" in rows[2]
    assert "5.99" in rows[2]
    assert "done" in rows[2]


def test_the_edges_table_lists_the_fastest_first() -> None:
    text = render(edges_table(COLD_START))
    assert text.index("ORNL -> Atlanta") < text.index("Denver -> Sunnyvale")
    assert "17.44" in text


def test_lnet_report_prints_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    COLD_START.save(tmp_path / "r.json")
    assert cli.main(["report", str(tmp_path / "r.json")]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "abilene.bin: 256.0 MiB in 300.0 s (7.16 Mbit/s), 3 path attempts" in out
    assert "Path attempts" in out
    assert "Edge throughputs" in out


def test_lnet_report_refuses_an_invalid_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text("{}")
    assert cli.main(["report", str(tmp_path / "r.json")]) == ExitCode.USAGE
    assert "invalid report" in capsys.readouterr().err
    assert cli.main(["report"]) == ExitCode.USAGE
    assert cli.main([]) == ExitCode.USAGE


def test_lnet_help_lists_report_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "report" in out
    assert "3    unreachable" in out


def test_without_matplotlib_plotting_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PlotUnavailable, match=r"pip install 'lnet\[plot\]'"):
        plot(COLD_START, tmp_path / "p.png")
    COLD_START.save(tmp_path / "r.json")
    assert cli.main(["report", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png")]) == ExitCode.USAGE
    assert "pip install 'lnet[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_the_plot_draws_throughput_and_path_switches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (the extra lnet[plot]) is not installed; ./run installs it")
    from matplotlib.image import imread

    COLD_START.save(tmp_path / "cold.json")
    warm = Report(
        "abilene.bin", COLD_START.size, 180.0, COLD_START.path_attempts[2:],
        (TimelinePoint(0.0, 0, 0.0, ()), TimelinePoint(180.0, COLD_START.size, 11.9, ())), (),
    )
    warm.save(tmp_path / "warm.json")
    out = tmp_path / "figure1.png"
    assert cli.main(["report", str(tmp_path / "cold.json"), str(tmp_path / "warm.json"), "--plot", str(out)]) == 0
    assert f"plot saved to {out}" in capsys.readouterr().out
    image = imread(out)
    assert image.shape[:2] == (540, 1000)
    assert len({tuple(pixel) for pixel in image.reshape(-1, image.shape[2])[::97]}) > 5  # not a blank canvas

    plain = tmp_path / "one.png"
    plot(COLD_START, plain)
    with_switches = imread(plain)
    no_switches = Report(**{**COLD_START.__dict__, "path_attempts": COLD_START.path_attempts[:1]})
    plot(no_switches, tmp_path / "none.png")
    assert (imread(tmp_path / "none.png") != with_switches).any()  # the switch markers are drawn


def test_plot_refuses_mismatched_labels(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (the extra lnet[plot]) is not installed; ./run installs it")
    with pytest.raises(ValueError, match="2 reports but 1 labels"):
        plot([COLD_START, COLD_START], tmp_path / "p.png", labels=["one"])


def staircase(points: list[tuple[float, int]]) -> tuple[TimelinePoint, ...]:
    return tuple(TimelinePoint(t, nbytes, 0.0, ("a", "b")) for t, nbytes in points)


# 1 MB at 1 s, 2 MB by 2 s, nothing new at 3 s, 5 MB by 4 s. As ramps between arrivals: 8 Mbit/s until 2 s,
# then 3 MB over 2 s = 12 Mbit/s (so 3.5 MB had arrived by 3 s).
UNEVEN = staircase([(1.0, 1_000_000), (2.0, 2_000_000), (3.0, 2_000_000), (4.0, 5_000_000)])


def test_trailing_windows_average_the_ramps_between_arrivals() -> None:
    windows = windowed_rates(UNEVEN, 2.0)
    assert [(w.at, w.start, w.end) for w in windows] == [(1.0, 0.0, 1.0), (2.0, 0.0, 2.0), (3.0, 1.0, 3.0),
                                                         (4.0, 2.0, 4.0)]
    assert [w.mbps for w in windows] == pytest.approx([8.0, 8.0, 10.0, 12.0])
    assert windows[2] == RateWindow(3.0, 1.0, 3.0, pytest.approx(10.0))


def test_centred_windows_are_cut_at_both_ends() -> None:
    windows = windowed_rates(UNEVEN, 2.0, centred=True)
    assert [(w.start, w.end) for w in windows] == [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (3.0, 4.0)]
    assert [w.mbps for w in windows] == pytest.approx([8.0, 10.0, 12.0, 12.0])
    # a window that ends between samples interpolates: 1.5 s to 3.5 s is 4.25 MB - 1.5 MB over 2 s
    assert windowed_rates(staircase([(1.5, 1_500_000), (3.5, 4_250_000)]), 2.0)[1].mbps == pytest.approx(11.0)


def test_blocks_landing_now_and_then_give_an_even_rate() -> None:
    # 1 MB lands every 2 s, sampled every 0.5 s: the per-sample rate swings between 0 and 16 Mbit/s, and a plain
    # window over the staircase between 2 and 3 blocks' worth; the ramps give 4 Mbit/s throughout
    timeline = staircase([(k / 2, k // 4 * 1_000_000) for k in range(1, 21)])
    for window_s in (1.0, 3.0, 5.0):
        assert [w.mbps for w in windowed_rates(timeline, window_s)] == pytest.approx([4.0] * 20)
        assert [w.mbps for w in windowed_rates(timeline, window_s, centred=True)] == pytest.approx([4.0] * 20)


def test_after_the_last_arrival_the_count_stays_flat() -> None:
    windows = windowed_rates(staircase([(1.0, 1_000_000), (2.0, 1_000_000), (3.0, 1_000_000)]), 1.0)
    assert [w.mbps for w in windows] == pytest.approx([8.0, 0.0, 0.0])


def test_windowed_rates_of_nothing_and_nonsense() -> None:
    assert windowed_rates((), 5.0) == []
    assert windowed_rates(staircase([(0.0, 0)]), 5.0) == []
    with pytest.raises(ValueError, match="window_s"):
        windowed_rates(UNEVEN, 0.0)


def test_first_reaching_is_the_end_of_the_first_window_at_the_rate() -> None:
    assert first_reaching(UNEVEN, 10.0, 2.0) == 3.0
    assert first_reaching(UNEVEN, 8.0, 2.0) == 1.0
    assert first_reaching(UNEVEN, 12.5, 2.0) is None


def test_short_path_names_the_depots_on_the_way() -> None:
    assert short_path(("ornl", "svl")) == "direct"
    assert short_path(("ornl", "atl", "ind", "kc", "den", "svl")) == "via atl,ind,kc,den"


def test_the_figure_labels_runs_switches_and_units() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (the extra lnet[plot]) is not installed; ./run installs it")
    direct = Report("abilene.bin", 3_000_000, 4.0, (PathAttempt(("ORNL", "Sunnyvale"), 0.0, 4.0, 3_000_000, 6.0,
                                                                  "pinned"),), UNEVEN, ())
    drawn = figure([direct, COLD_START], labels=["direct", "cold"], window_s=4.0)
    axes = drawn.axes[0]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["direct: 6.00 Mbit/s mean, starts direct", "cold: 7.16 Mbit/s mean, starts direct",
                      "path change (labelled: the new path)"]
    assert [text.get_text() for text in axes.texts] == ["via Denver", "via Atlanta,Indianapolis,Kansas City,Denver"]
    assert "Mbit/s" in axes.get_ylabel()
    assert "4 s window" in axes.get_ylabel()
    assert axes.get_xlabel() == "Elapsed time (s)"
    # direct's line: the centred 4 s windows over its ramps, cut at 0 and 4 s (3.5 MB had arrived by 3 s)
    xs, ys = axes.lines[0].get_data()
    assert list(xs) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert list(ys) == pytest.approx([0.0, 3.5 * 8 / 3, 5.0 * 8 / 4, 4.0 * 8 / 3, 3.0 * 8 / 2])


def test_a_reach_that_is_held_ignores_a_burst_the_transfer_did_not_keep_up() -> None:
    # 2 MB in the first second (16 Mbit/s, TCP before its first loss), then 1 MB every 2 s (4 Mbit/s) until 9 s,
    # then 2 MB a second (16 Mbit/s: a wider path) until 13 s.
    points = [(1.0, 2_000_000), (3.0, 3_000_000), (5.0, 4_000_000), (7.0, 5_000_000), (9.0, 6_000_000)]
    points += [(10.0, 8_000_000), (11.0, 10_000_000), (12.0, 12_000_000), (13.0, 14_000_000)]
    timeline = staircase(points)
    assert first_reaching(timeline, 12.0, 2.0) == 1.0  # the burst
    # Held: from 9 s the transfer averaged 16 Mbit/s to its end; the window [9, 11] is the first to reach 12.
    assert first_reaching(timeline, 12.0, 2.0, held=True) == 11.0
    # The whole transfer averaged 14 MB over 13 s = 8.6 Mbit/s: a rate of 8 is held from the first window.
    assert first_reaching(timeline, 8.0, 2.0, held=True) == 1.0
    assert first_reaching(timeline, 17.0, 2.0, held=True) is None
