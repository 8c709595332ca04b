"""What the part file's final fsync costs a download, with and without the write-behind of hashed bytes.

    .venv/bin/python bench/part_commit.py [--size 256MiB] [--runs 5] [--dir DIR]

Writes --size bytes into a ``PartFile`` in 4 MiB pieces, in order, as a download's writes land, while a
``PrefixHasher`` hashes the growing prefix (and, unless it is switched off, starts the writeback of what it has
hashed: ``partfile.write_behind``); then times ``commit`` (fsync and rename), which a download pays after its last
byte. Both variants alternate, --runs times each; medians with the lowest and highest. The disk and the kernel's
writeback settings decide the figures: run it alone on the machine, on the disk the downloads go to (--dir).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from lnet.client.fetching import partfile
from lnet.client.fetching.partfile import PartFile, PrefixHasher
from lnet.units import parse_size

PIECE = 4 * 1024 * 1024


async def one(directory: Path, size: int, behind: bool) -> float:
    saved = partfile.write_behind
    if not behind:
        partfile.write_behind = lambda fd, offset, length: None
    try:
        out = directory / f"file-{behind}.bin"
        part = PartFile.open(out)
        try:
            part.preallocate(size)
            written = 0
            hasher = PrefixHasher(part.fd, size, "sha256", lambda: written)
            piece = os.urandom(PIECE)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hasher.run)
                while written < size:
                    n = min(PIECE, size - written)
                    await trio.to_thread.run_sync(part.write_at, piece[:n], written)
                    written += n
                    hasher.advanced()
            began = time.perf_counter()
            part.commit()
            took = time.perf_counter() - began
        finally:
            part.close()
        out.unlink()
        return took
    finally:
        partfile.write_behind = saved


async def main(size: int, runs: int, directory: Path) -> None:
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(runs):
        for behind in (False, True):
            times[behind].append(await one(directory, size, behind))
    for behind, label in ((False, "without write-behind"), (True, "with write-behind")):
        t = times[behind]
        print(f"{label}: commit (fsync + rename) of {size} bytes {statistics.median(t) * 1000:.0f} ms median "
              f"({min(t) * 1000:.0f}-{max(t) * 1000:.0f}), {runs} runs")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=parse_size, default=parse_size("256MiB"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dir", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="lnet-part-commit-") as scratch:
        trio.run(main, args.size, args.runs, Path(scratch))
    sys.exit(0)
