"""``lnet-get URL ...`` starts without an idle probe: every replica's first request is a data range, sent as its
connection opens; the first answer fixes the file (length and validators) and every later one is checked against
it before any of its bytes are written. On the emulated network (autojump clock) unless a test is about real
sockets."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.engines.chunks import PlanConfig
from lnet.client.exits import ExitCode
from lnet.client.fetching.mirrors import STATE_FORMAT, MirrorError, fetch_mirrors
from lnet.client.fetching.partfile import part_path, state_path

from .http_replicas import Replica, emulated, replicas

MiB = 1024 * 1024
KiB = 1024
DATA = os.urandom(6 * MiB + 12345)
SHA = hashlib.sha256(DATA).hexdigest()
OTHER = bytes(len(DATA))  # the same length, other bytes (served under another ETag)
FIRST = 256 * KiB
CONFIG = PlanConfig(initial_chunk=FIRST, min_chunk=64 * KiB, static_chunk=512 * KiB, stall_s=10.0,
                    backoff_s=0.2, round_min_s=0.2)


async def test_every_replica_gets_a_data_range_at_once_and_none_waits_for_the_slowest(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    servers = [Replica(DATA, rate=8e6), Replica(DATA, rate=8e6), Replica(DATA, rate=8e6, first_answer_delay=5.0)]
    first_byte: dict[int, float] = {}
    last_byte = [0.0]
    start = trio.current_time()

    def on_progress(replica: int, nbytes: int) -> None:
        first_byte.setdefault(replica, trio.current_time() - start)
        last_byte[0] = trio.current_time() - start

    async with emulated(*servers) as (_, connect):
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, sha256=SHA, connect=connect,
                                     on_progress=on_progress)
    assert out.read_bytes() == DATA
    # each replica's first request was a range of FIRST bytes at an offset of its own, not a probe of byte 0
    assert [s.ranges[0] for s in servers[:2]] == [(0, FIRST), (FIRST, 2 * FIRST)]
    assert servers[2].requests >= 1
    # the two prompt replicas delivered at once; the old probe waited 5 s for the slow one's answer
    assert first_byte[0] < 0.1
    assert first_byte[1] < 0.1
    # its ranges went to the others once it was seen to be silent (1 s), not after its 5 s (result.seconds is no
    # measure here: the autojump clock jumps to the silent one's timer while the hash and the rename run in threads)
    assert last_byte[0] < 2.0
    assert sum(r.bytes for r in result.replicas) == len(DATA)


async def test_a_replica_whose_first_answer_differs_is_refused_and_none_of_its_bytes_land(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    odd = Replica(OTHER, etag='"something-else"', rate=16e6, first_answer_delay=0.05)  # answers after the others
    servers = [Replica(DATA, rate=4e6), Replica(DATA, rate=4e6), odd]
    async with emulated(*servers) as (_, connect):
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, connect=connect)
    assert out.read_bytes() == DATA  # OTHER is all zeros: one of its bytes in the output would show
    assert result.replicas[2].state == "refused"
    assert "ETag" in result.replicas[2].reason
    assert result.replicas[2].bytes == 0
    assert len(odd.ranges) == 1  # its first range, answered and refused; nothing more was asked of it
    assert odd.ranges[0] == (2 * FIRST, 3 * FIRST)  # ... and that range went to the others
    assert result.replicas[0].bytes + result.replicas[1].bytes == len(DATA)


async def test_a_stale_replica_answering_first_is_outvoted_and_the_download_starts_over(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    stale = Replica(OTHER, etag='"stale"', rate=4e6)  # answers first: it fixes the reference
    servers = [stale, *(Replica(DATA, rate=4e6, first_answer_delay=0.05) for _ in range(2))]
    async with emulated(*servers) as (_, connect):
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, sha256=SHA, connect=connect)
    assert out.read_bytes() == DATA  # two replicas agree on DATA: theirs is the file
    assert result.replicas[0].state == "refused"
    assert result.replicas[0].bytes == 0
    assert "ETag" in result.replicas[0].reason


async def test_a_first_answer_of_another_length_is_refused(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    shorter = Replica(DATA[: 2 * FIRST + 10], rate=16e6, first_answer_delay=0.05)  # its first range crosses its end
    servers = [Replica(DATA, rate=4e6), Replica(DATA, rate=4e6), shorter]
    async with emulated(*servers) as (_, connect):
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, sha256=SHA, connect=connect)
    assert out.read_bytes() == DATA
    assert result.replicas[2].state == "refused"
    assert f"its file has {2 * FIRST + 10} bytes" in result.replicas[2].reason
    assert result.replicas[2].bytes == 0


async def test_a_file_smaller_than_the_first_ranges(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    small = DATA[: FIRST + 100]  # the first ranges of replicas 1 (cut) and 2 and 3 (past the end, a 416 each)
    for data in (small, b""):
        out = tmp_path / f"small-{len(data)}.bin"
        servers = [Replica(data, rate=4e6) for _ in range(4)]
        async with emulated(*servers) as (_, connect):
            result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG,
                                         sha256=hashlib.sha256(data).hexdigest(), connect=connect)
        assert out.read_bytes() == data
        assert result.size == len(data)
        assert [r.state for r in result.replicas] == ["ok"] * 4  # a 416 past the end is no fault
        assert sum(r.bytes for r in result.replicas) == len(data)


async def test_a_validator_mismatch_on_real_sockets(tmp_path: Path) -> None:
    out = tmp_path / "file.bin"
    odd = Replica(OTHER, etag='"something-else"', rate=8e6, first_answer_delay=0.3)
    async with replicas(Replica(DATA, rate=8e6), Replica(DATA, rate=8e6), odd) as servers:
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, sha256=SHA)
    assert out.read_bytes() == DATA
    assert result.replicas[2].state == "refused"
    assert "ETag" in result.replicas[2].reason
    assert result.replicas[2].bytes == 0
    assert len(odd.ranges) == 1


async def test_a_resume_keeps_its_bytes_and_checks_every_answer_against_its_state(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(Replica(DATA, rate=2e6), Replica(DATA, rate=2e6)) as (servers, connect):
        urls = [s.url for s in servers]
        with trio.move_on_after(1.0):
            await fetch_mirrors(urls, out, config=CONFIG, connect=connect)
        saved = json.loads(state_path(out).read_text())
        assert saved["format"] == STATE_FORMAT
        assert saved["etag"] == '"lnet-test-1"'
        before = [len(s.ranges) for s in servers]
        result = await fetch_mirrors(urls, out, config=CONFIG, sha256=SHA, connect=connect)
        resumed_ranges = [s.ranges[n:] for s, n in zip(servers, before, strict=True)]
    assert out.read_bytes() == DATA
    assert 0 < result.resumed_bytes < len(DATA)
    have = [tuple(span) for span in saved["have"]]
    for ranges in resumed_ranges:  # the second run asked for none of what the first left in place
        for start, end in ranges:
            assert all(end <= a or start >= b for a, b in have), (start, end, have)


async def test_a_resume_whose_file_changed_everywhere_starts_over(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(Replica(DATA, rate=2e6), Replica(DATA, rate=2e6)) as (servers, connect):
        with trio.move_on_after(1.0):
            await fetch_mirrors([s.url for s in servers], out, config=CONFIG, connect=connect)
    assert state_path(out).exists()
    new = os.urandom(len(DATA) + 1)
    changed = [Replica(new, etag='"lnet-test-2"', rate=2e6), Replica(new, etag='"lnet-test-2"', rate=2e6)]
    async with emulated(*changed) as (servers, connect):
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG,
                                     sha256=hashlib.sha256(new).hexdigest(), connect=connect)
    assert out.read_bytes() == new
    assert result.resumed_bytes == 0
    assert [r.state for r in result.replicas] == ["ok", "ok"]


async def test_a_single_replica_whose_file_changed_since_the_state_starts_over(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(Replica(DATA, rate=2e6)) as (servers, connect):
        with trio.move_on_after(1.0):
            await fetch_mirrors([servers[0].url], out, config=CONFIG, connect=connect)
    new = os.urandom(len(DATA))  # the same length: only the ETag tells
    async with emulated(Replica(new, etag='"lnet-test-2"', rate=8e6)) as (servers, connect):
        result = await fetch_mirrors([servers[0].url], out, config=CONFIG, connect=connect)
    assert out.read_bytes() == new
    assert result.resumed_bytes == 0


async def test_no_replica_answering_fails_at_once_and_leaves_no_part_file(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(Replica(DATA)) as (servers, connect):
        servers[0].kill()
        start = trio.current_time()
        with pytest.raises(MirrorError, match="no replica answered") as info:
            await fetch_mirrors([servers[0].url, "http://127.0.0.1:99/file.bin"], out, config=CONFIG,
                                connect=connect)
        assert trio.current_time() - start < 1.0  # not after the retries' back-offs
    assert info.value.exit_code == ExitCode.UNREACHABLE
    assert not part_path(out).exists()
