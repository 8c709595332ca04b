"""Real depot processes on loopback for tests of the command-line programs (which run trio themselves)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_SERVING = re.compile(rb"serving on (\S+)")


@dataclass
class LoopbackDepot:
    name: str
    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@contextmanager
def loopback_depots(names: list[str], tmp: Path, *extra: str) -> Iterator[dict[str, LoopbackDepot]]:
    """``lnet-depot`` processes on 127.0.0.1 port 0, one per name; all killed at the end."""
    started: dict[str, LoopbackDepot] = {}
    try:
        for name in names:
            with (tmp / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
                process = subprocess.Popen(
                    [sys.executable, "-m", "lnet.depot.cli", "--listen", "127.0.0.1:0", "--name", name,
                     "--data-dir", str(tmp / f"data-{name}"), "--log-level", "warning", *extra],
                    stdin=subprocess.DEVNULL, stderr=log,
                )
            started[name] = LoopbackDepot(name, "", process)
        deadline = time.monotonic() + 20
        for name, depot in started.items():
            while not depot.url:
                match = _SERVING.search((tmp / f"{name}.log").read_bytes())
                if match:
                    depot.url = match.group(1).decode()
                elif depot.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"depot {name} did not start: {(tmp / f'{name}.log').read_text()}")
                else:
                    time.sleep(0.05)
        yield started
    finally:
        for depot in started.values():
            if depot.process.poll() is None:
                depot.kill()


def depots_file(tmp: Path, depots: dict[str, LoopbackDepot], here: str = "me") -> Path:
    path = tmp / "depots.toml"
    lines = [f'here = "{here}"']
    for name, depot in depots.items():
        lines += [f"[depots.{name}]", f'url = "{depot.url}"']
    path.write_text("\n".join(lines) + "\n")
    return path
