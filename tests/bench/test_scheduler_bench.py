"""bench/scheduler.py --random --only --trace: a scenario's runs step by step, read to see where a run lost."""

from __future__ import annotations

import pytest

from .benches import load_bench

sched = load_bench("scheduler")


def job(index: int, *, trace: bool) -> object:
    # seed 7, 20-s cold and warm runs, 1-s steps, deep probes and cold scouts, lnet-send's block, nothing else
    return sched.RandomJob(7, index, 20.0, 20.0, 1.0, deep=True, scouts=True, depots=None, max_depots=None,
                           block=sched.SEND_BLOCK, wait=False, peers=False, at_start=False, trace=trace)


def test_a_trace_gives_each_step_its_paths_rates_and_the_probes_beside_them() -> None:
    row = sched.run_random(job(0, trace=True))
    for run in ("cold", "warm"):
        steps = row["trace"][run]["steps"]
        assert [s["t"] for s in steps] == [float(t) for t in range(20)]
        # the steps are the run the row's figures come from: their mean is its rate, their paths add up to each
        assert sum(s["mbps"] for s in steps) / len(steps) == pytest.approx(row[f"{run}_mbps"], abs=0.01)
        for s in steps:
            assert sum(mbps for _, mbps in s["paths"]) == pytest.approx(s["mbps"], abs=0.01)
    cold = row["trace"]["cold"]["steps"]
    assert any(s["probes"] for s in cold)  # a cold start probes beside its first path from its first second
    assert all(len(edge) == 2 and streams >= 1 for s in cold for edge, streams in s["probes"])
    assert "trace" not in sched.run_random(job(0, trace=False))


def test_trace_prints_each_run_a_line_a_step(capsys: pytest.CaptureFixture[str]) -> None:
    row = sched.run_random(job(1, trace=True))
    sched.print_trace(row)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("r001 detour")
    assert ": cold run, " in lines[0]
    warm = next(i for i, line in enumerate(lines) if ": warm run, " in line)
    steps = [line for line in lines if line.lstrip()[:1].isdigit() and " s " in line]
    assert len(steps) >= 40  # a line a step of each run, and a line a decision
    assert lines[warm + 1].split()[:2] == ["0.0", "s"]


def test_trace_needs_only(capsys: pytest.CaptureFixture[str]) -> None:
    # the workers run each scenario with a fixed hash seed; a trace of every scenario would be thousands of lines
    with pytest.raises(SystemExit):
        sched.main(["--random", "6", "--seed", "7", "--trace"])
    assert "--trace needs --only" in capsys.readouterr().err
