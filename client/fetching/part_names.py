"""Where a download's part file and its resume state live beside ``OUT`` (the standard library only: a command
checks for them before the event loop is loaded)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["part_path", "state_path"]


def part_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-part")


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-part.state")
