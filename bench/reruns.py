"""The command that runs a benchmark's random scenarios again, printed first by each of them."""

from __future__ import annotations

from collections.abc import Sequence


def rerun_command(script: str, argv: Sequence[str], seed: int) -> str:
    """``bench/<script>.py`` with every option given (--runs, --size, --peer-rtts... change the run), the seed
    drawn if none was given, and no --out (where the next run's files go is its caller's choice)."""
    words: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif not word.startswith("--out="):
            words.append(word)
    if not any(word == "--seed" or word.startswith("--seed=") for word in words):
        words += ["--seed", str(seed)]
    return " ".join([f"bench/{script}.py", *words])
