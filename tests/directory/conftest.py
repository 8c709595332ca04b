"""Fixtures of the directory's tests: a real etcd on loopback (``etcd_server.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .etcd_server import ETCD, EtcdServer


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    if ETCD is None:
        pytest.skip("no etcd binary (apt-get install etcd-server; ./run test installs it as root)")
    with EtcdServer(tmp_path / "etcd") as server:
        yield server
