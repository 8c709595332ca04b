"""The store alone: capacity accounting, expiry order, pins, and what a restart finds on disk."""

from __future__ import annotations

import json
import logging
import stat
import sys
from pathlib import Path
from unittest.mock import patch

import pytest

from lnet.depot.store import POOL_IDLE_S, Kind, Reliability, Store, prefault
from lnet.protocol import NotFound

NOW = 1_800_000_000.0
MiB = 1024 * 1024


def make(tmp_path: Path, capacity: int = 1000, now: float = NOW) -> Store:
    store = Store(capacity=capacity, max_allocation=capacity, max_duration=3600, data_dir=tmp_path / "data")
    store.open(now)
    return store


def test_expiry_reaps_in_order_and_extend_moves_it(tmp_path: Path) -> None:
    store = make(tmp_path)
    (short, _), = store.allocate(100, 10, Reliability.SOFT, 1, NOW)
    (long_, caps), = store.allocate(100, 20, Reliability.SOFT, 1, NOW)
    assert store.extend(short, 30, NOW + 5) == NOW + 40
    assert store.lookup(Kind.READ, caps.read, NOW + 19.9) is long_
    with pytest.raises(NotFound):  # expired is gone at once, before the reaper comes by
        store.lookup(Kind.READ, caps.read, NOW + 20)
    assert store.reap(NOW + 20) == 1  # only the one that was not extended
    assert store.used == 100
    assert store.reap(NOW + 40) == 1
    assert store.used == 0
    assert store.next_expiry() is None


def test_a_freed_allocation_stays_counted_while_it_streams(tmp_path: Path) -> None:
    store = make(tmp_path)
    (alloc, caps), = store.allocate(400, 10, Reliability.SOFT, 1, NOW)
    with store.pinned(alloc):
        store.free(alloc)
        with pytest.raises(NotFound):
            store.lookup(Kind.READ, caps.read, NOW)
        assert store.used == 400  # its memory is still mapped: it still counts against the capacity
        assert not alloc.closed
    assert alloc.closed
    assert store.used == 0


def test_restart_drops_expired_and_corrupt_records(tmp_path: Path) -> None:
    store = make(tmp_path)
    (kept, kept_caps), = store.allocate(100, 600, Reliability.HARD, 1, NOW)
    kept.buffer[0:5] = b"hello"
    store.commit_write(kept, 5)
    store.allocate(100, 10, Reliability.HARD, 1, NOW)
    (broken, _), = store.allocate(100, 600, Reliability.HARD, 1, NOW)
    store.close()
    assert broken.path is not None
    broken.path.with_suffix(".meta.json").write_text(json.dumps({"format": "something else"}))
    (tmp_path / "data" / "stray.meta.json").write_text("{not json")

    again = make(tmp_path, now=NOW + 100)
    assert again.allocations == 1
    assert again.used == 100
    alloc = again.lookup(Kind.READ, kept_caps.read, NOW + 100)
    assert (alloc.length, alloc.buffer[0:5]) == (5, b"hello")
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert names == [".lock", f"{kept.ident}.data", f"{kept.ident}.meta.json"]
    again.close()


def test_one_data_directory_serves_one_depot(tmp_path: Path) -> None:
    make(tmp_path)
    with pytest.raises(RuntimeError, match="in use by another depot"):
        make(tmp_path)


def test_freed_buffers_are_reused_and_never_leak_their_bytes(tmp_path: Path) -> None:
    store = make(tmp_path, capacity=8 * MiB)
    (first, _), = store.allocate(MiB, 60, Reliability.SOFT, 1, NOW)
    first.buffer[0:6] = b"secret"
    store.commit_write(first, 6)
    store.free(first)
    assert (store.used, store.pooled) == (0, MiB)
    (second, caps), = store.allocate(MiB, 60, Reliability.SOFT, 1, NOW)
    assert second.buffer is first.buffer  # no page faults, no zeroing
    assert (store.used, store.pooled, second.length) == (MiB, 0, 0)  # nothing of the old bytes is readable


def test_pooled_and_live_memory_together_stay_within_the_capacity(tmp_path: Path) -> None:
    store = make(tmp_path, capacity=4 * MiB)
    made = store.allocate(MiB, 60, Reliability.SOFT, 4, NOW)
    for alloc, _ in made:
        store.free(alloc)
    assert store.pooled == 4 * MiB
    store.allocate(2 * MiB, 60, Reliability.SOFT, 1, NOW)  # another size: pooled buffers make room
    assert store.used + store.pooled <= 4 * MiB
    store.allocate(MiB, 60, Reliability.SOFT, 2, NOW)  # reuses the two still pooled
    assert (store.used, store.pooled) == (4 * MiB, 0)


def test_idle_pooled_buffers_go_back_to_the_system(tmp_path: Path) -> None:
    store = make(tmp_path, capacity=4 * MiB)
    (alloc, _), = store.allocate(MiB, 60, Reliability.SOFT, 1, NOW)
    store.free(alloc)
    assert store.next_pool_trim() == NOW + POOL_IDLE_S
    store.trim_pool(NOW + POOL_IDLE_S / 2)
    assert store.pooled == MiB
    store.trim_pool(NOW + POOL_IDLE_S)
    assert store.pooled == 0
    assert alloc.buffer.closed



def test_a_pooled_buffer_whose_last_view_lingers_is_unmapped_when_it_goes(tmp_path: Path) -> None:
    # An HTTP stack may still hold the last piece it sent after the request ended: trimming the pool, making room
    # and shutting down must not fail on it (shutdown once did: "BufferError: cannot close exported pointers").
    store = make(tmp_path, capacity=4 * MiB)
    made = store.allocate(MiB, 60, Reliability.SOFT, 3, NOW)
    lingering = [alloc.view(0, 16) for alloc, _ in made]
    for alloc, _ in made:
        store.free(alloc)
    store.trim_pool(NOW + POOL_IDLE_S)
    assert store.pooled == 0
    assert not made[0][0].buffer.closed  # the view keeps it mapped...
    store.allocate(2 * MiB, 60, Reliability.SOFT, 1, NOW + POOL_IDLE_S)
    store.close()
    for view in lingering:
        view.release()
    made[0][0].buffer.close()  # ...and once it is gone the buffer closes
    assert made[0][0].buffer.closed


def _vm_flags(address: int) -> list[str] | None:
    """``VmFlags`` of the mapping holding ``address`` in /proc/self/smaps (None: not found)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_soft_allocations_are_private_memory_not_shmem(tmp_path: Path) -> None:
    # a shared anonymous map is shmem: its pages fault in slower (docs/depot.md, the three-depot chain)
    import ctypes

    store = make(tmp_path, capacity=64 * MiB)
    (alloc, _), = store.allocate(8 * MiB, 60, Reliability.SOFT, 1, NOW)
    pointer = ctypes.c_char.from_buffer(alloc.buffer)
    flags = _vm_flags(ctypes.addressof(pointer))
    del pointer
    assert flags is not None
    assert "sh" not in flags
    alloc.buffer[:5] = b"bytes"
    store.commit_write(alloc, 5)
    assert bytes(alloc.view(0, 5)) == b"bytes"


def test_an_existing_data_directory_is_made_private(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # as a directory made by hand (or by an older depot) under the usual umask
    with caplog.at_level(logging.WARNING, logger="lnet.depot.store"):
        store = make(tmp_path)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert "had mode 0755; made it 0700" in caplog.text
    store.close()


def test_a_data_directory_that_cannot_be_made_private_is_refused(tmp_path: Path) -> None:
    """As when the directory belongs to another user (chmod is then refused; root, which runs the suite here, is
    never refused, hence the stand-in)."""
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    store = Store(capacity=1000, max_allocation=1000, max_duration=3600, data_dir=data)
    with patch.object(Path, "chmod", side_effect=PermissionError(1, "Operation not permitted")), \
            pytest.raises(RuntimeError, match="mode 0755 and cannot be made 0700"):
        store.open(NOW)


def test_orphan_data_files_are_removed_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = make(tmp_path)
    (kept, _), = store.allocate(100, 600, Reliability.HARD, 1, NOW)
    store.close()
    data = tmp_path / "data"
    orphan = data / ("0" * 32 + ".data")  # a depot stopped between the data file and its record
    orphan.write_bytes(b"x" * 300)
    with caplog.at_level(logging.WARNING, logger="lnet.depot.store"):
        store = make(tmp_path)
    assert not orphan.exists()
    assert "removed orphan data file 00000000… (300 bytes)" in caplog.text
    assert store.allocations == 1
    assert (data / (kept.ident + ".data")).exists()
    store.close()


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def test_fresh_marks_the_new_anonymous_mappings_only(tmp_path: Path) -> None:
    store = make(tmp_path, capacity=64 * MiB)
    (new, _), = store.allocate(2 * MiB, 10, Reliability.SOFT, 1, NOW)
    (hard, _), = store.allocate(2 * MiB, 10, Reliability.HARD, 1, NOW)
    assert new.fresh
    assert not hard.fresh  # a file's pages are the page cache's
    store.free(new)
    (again, _), = store.allocate(2 * MiB, 10, Reliability.SOFT, 1, NOW)  # from the pool: written before
    assert not again.fresh


@pytest.mark.skipif(sys.platform != "linux", reason="MADV_POPULATE_WRITE is Linux's (5.14 and later)")
def test_prefault_brings_every_page_in_and_keeps_the_buffer_zeroed_and_writable(tmp_path: Path) -> None:
    store = make(tmp_path, capacity=256 * MiB)
    (alloc, _), = store.allocate(64 * MiB, 10, Reliability.SOFT, 1, NOW)
    before = _rss()
    with store.pinned(alloc):
        assert prefault(alloc.buffer)
    assert _rss() - before >= 60 * MiB  # resident now, not at the first write
    assert alloc.buffer[:4096] == bytes(4096)
    assert alloc.buffer[-4096:] == bytes(4096)
    alloc.buffer[MiB : MiB + 5] = b"bytes"
    assert alloc.buffer[MiB : MiB + 5] == b"bytes"
    store.free(alloc)  # the export prefault took is gone: the buffer goes to the pool or is unmapped
    store.close()
