"""The rerun command each random benchmark prints first: it must run the same scenarios the same way."""

from __future__ import annotations

from .benches import load_bench

reruns = load_bench("reruns")


def test_the_rerun_command_keeps_every_option_and_adds_the_seed_drawn() -> None:
    # a full-size path-choice run of one repetition printed a rerun without --runs 1, which would have run three
    argv = ["--random", "12", "--runs", "1", "--out", "/tmp/x", "--max-paths", "2", "--out=/tmp/y"]
    assert reruns.rerun_command("pathchoice", argv, 7) == (
        "bench/pathchoice.py --random 12 --runs 1 --max-paths 2 --seed 7")


def test_a_seed_given_is_kept_as_given() -> None:
    for given in (["--random", "12", "--seed=5", "--quick"], ["--random", "12", "--seed", "5", "--peer-rtts"]):
        assert reruns.rerun_command("scheduler", given, 7) == " ".join(["bench/scheduler.py", *given])
