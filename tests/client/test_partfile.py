"""The one part file every download writes through (``lnet.client.fetching.partfile``): locked, preallocated,
positional writes, fsync and rename; and the prefix hasher over it. Two downloads to the same ``OUT`` at once
cannot both write it, whether they fetch from depots or from replicas."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get
from lnet.client.commands.clientio import ClientIO
from lnet.client.engines.chunks import PlanConfig
from lnet.client.exits import ExitCode
from lnet.client.fetching.mirrors import MirrorError, MirrorResult, fetch_mirrors
from lnet.client.fetching.partfile import (
    STATE_SAVE_INTERVAL_S,
    PartFile,
    PartFileBusy,
    PrefixHasher,
    StateFile,
    part_path,
    state_path,
)

from .http_replicas import Replica, emulated

MiB = 1024 * 1024
DATA = os.urandom(3 * MiB + 777)
SHA = hashlib.sha256(DATA).hexdigest()
CONFIG = PlanConfig(initial_chunk=256 * 1024, min_chunk=64 * 1024, stall_s=5.0, backoff_s=0.2, round_min_s=0.2)


def test_a_second_open_of_the_same_output_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    out = tmp_path / "f"
    first = PartFile.open(out)
    try:
        with pytest.raises(PartFileBusy, match="another lnet-get is writing"):
            PartFile.open(out)
    finally:
        first.close()
    PartFile.open(out).close()  # free again


def test_positional_writes_then_commit_puts_the_file_in_place(tmp_path: Path) -> None:
    out = tmp_path / "f"
    part = PartFile.open(out)
    try:
        part.preallocate(10)
        assert part.size() == 10
        part.write_at(b"world", 5)
        part.write_at(b"hello", 0)
        part.commit()
    finally:
        part.close()
    assert out.read_bytes() == b"helloworld"
    assert not part_path(out).exists()


async def test_the_prefix_hasher_hashes_only_what_is_in_place_and_all_of_it_at_the_end(tmp_path: Path) -> None:
    data = os.urandom(5 * MiB + 3)
    path = tmp_path / "p"
    path.write_bytes(data)
    in_place = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        hasher = PrefixHasher(fd, len(data), "sha256", lambda: in_place)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hasher.run)
            await trio.sleep(0.05)
            assert hasher.hashed == 0
            in_place = 2 * MiB
            hasher.advanced()
            with trio.fail_after(10):
                while hasher.hashed < 2 * MiB:  # noqa: ASYNC110 -- advanced by worker threads
                    await trio.sleep(0.01)
            assert hasher.hashed == 2 * MiB  # never past what is in place
            with pytest.raises(RuntimeError, match="only"):
                hasher.hexdigest()
            in_place = len(data)
            hasher.advanced()
        assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)


async def test_the_prefix_hasher_starts_writing_back_what_it_has_hashed_and_nothing_beyond(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What is hashed is final: its writeback starts at once (so ``commit``'s fsync has little left to do), and
    never for bytes past the prefix, which may still change."""
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: (
        advised.append((offset, length, advice)), real(fd, offset, length, advice))[1])
    data = os.urandom(9 * MiB + 5)
    path = tmp_path / "p"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        hasher = PrefixHasher(fd, len(data), "sha256", lambda: 6 * MiB)
        with trio.move_on_after(0.5):
            await hasher.run()
        assert hasher.hashed == 6 * MiB
        assert advised == [(0, 4 * MiB, os.POSIX_FADV_DONTNEED), (4 * MiB, 2 * MiB, os.POSIX_FADV_DONTNEED)]
    finally:
        os.close(fd)


async def test_two_replica_downloads_to_the_same_output_cannot_both_write_it(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    outcomes: list[MirrorResult | MirrorError] = []

    async def one(urls: list[str]) -> None:
        try:
            outcomes.append(await fetch_mirrors(urls, out, config=CONFIG, sha256=SHA, connect=connect))
        except MirrorError as exc:
            outcomes.append(exc)

    async with emulated(Replica(DATA, rate=2e6), Replica(DATA, rate=2e6)) as (servers, connect):
        urls = [s.url for s in servers]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, urls)
            nursery.start_soon(one, urls)
    failed = [o for o in outcomes if isinstance(o, MirrorError)]
    done = [o for o in outcomes if isinstance(o, MirrorResult)]
    assert len(done) == 1
    assert len(failed) == 1
    assert failed[0].exit_code == ExitCode.USAGE
    assert "another lnet-get is writing" in str(failed[0])
    assert out.read_bytes() == DATA
    assert not part_path(out).exists()
    assert not state_path(out).exists()


async def test_two_lnet_get_commands_on_the_same_output_one_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    """The whole command twice at once (parsing, output, exit code), on the in-memory replica network."""
    out = tmp_path / "file.bin"
    codes: list[int] = []
    async with emulated(Replica(DATA, rate=2e6), Replica(DATA, rate=2e6)) as (servers, connect):
        argv = [s.url for s in servers] + ["-o", str(out), "--no-progress", "--sha256", SHA, "--initial-chunk",
                                          "256KiB", "--history", str(tmp_path / "h.json")]

        async def lnet_get() -> None:
            codes.append(await get.run(argv, io=ClientIO(connect=connect)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lnet_get)
            nursery.start_soon(lnet_get)
    assert sorted(codes) == [ExitCode.OK, ExitCode.USAGE]
    assert "another lnet-get is writing" in capsys.readouterr().err
    assert out.read_bytes() == DATA


def test_the_state_is_saved_at_most_every_interval_and_always_at_the_end(tmp_path: Path) -> None:
    have: list[int] = []
    state = StateFile(tmp_path / "s", lambda: {"have": have})
    assert state.read() is None  # nothing yet: ignored, not refused
    have.append(1)
    state.changed(10.0)
    assert state.read() == {"have": [1]}
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o600
    have.append(2)
    state.changed(10.0 + STATE_SAVE_INTERVAL_S / 2)  # too soon after the last save
    assert state.read() == {"have": [1]}
    state.save(10.0 + STATE_SAVE_INTERVAL_S / 2)  # the end of a run: whatever changed
    assert state.read() == {"have": [1, 2]}
    state.remove()
    assert not (tmp_path / "s").exists()
