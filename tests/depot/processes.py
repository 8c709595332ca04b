"""Real depot processes for end-to-end tests: ``lnet-depot`` on port 0, its URL read from its log."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

_LISTENING = re.compile(r"serving on (\S+)")


@dataclass
class DepotProcess:
    process: trio.Process
    url: str = ""
    log: list[str] = field(default_factory=list)

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    async def wait(self) -> int:
        with trio.fail_after(20):
            return await self.process.wait()


async def _pump(depot: DepotProcess, ready: trio.Event) -> None:
    assert depot.process.stderr is not None
    buffer = b""
    async for chunk in depot.process.stderr:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            depot.log.append(line)
            match = _LISTENING.search(line)
            if match and not ready.is_set():
                depot.url = match.group(1)
                ready.set()
    ready.set()


@asynccontextmanager
async def depot_process(
    *args: str, startup_timeout: float = 20, env: dict[str, str] | None = None
) -> AsyncIterator[DepotProcess]:
    """Run ``lnet-depot --listen 127.0.0.1:0 ARGS`` until the block ends (then SIGKILL if still running);
    ``env`` adds to the environment."""
    argv = [sys.executable, "-m", "lnet.depot.cli", "--listen", "127.0.0.1:0", *args]
    async with trio.open_nursery() as nursery:
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
        )
        depot = DepotProcess(process)
        ready = trio.Event()
        nursery.start_soon(_pump, depot, ready)
        try:
            with trio.fail_after(startup_timeout):
                await ready.wait()
            if not depot.url:
                raise RuntimeError("depot exited before listening:\n" + "\n".join(depot.log))
            yield depot
        finally:
            if process.returncode is None:
                process.kill()
            with trio.move_on_after(10):
                await process.wait()
