"""Fixtures for testbed tests. Tests that bring a testbed up need root and working network namespaces; elsewhere
they skip and say so (the `requires_root` fixture, which every such test uses, and the `root` marker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "deploy" / "topologies"


def _namespaces_work() -> str | None:
    """None if this process can make network namespaces and TUN devices, else why not."""
    if os.geteuid() != 0:
        return f"needs root and network namespaces (the testbed); running as uid {os.geteuid()}"
    if shutil.which("ip") is None:
        return "needs root and network namespaces (the testbed); the `ip` command is missing"
    if not os.path.exists("/dev/net/tun"):
        return "needs root and network namespaces (the testbed); /dev/net/tun is missing"
    probe = f"lnet-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"needs root and network namespaces (the testbed); `ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


_WHY_NOT = _namespaces_work()


@pytest.fixture
def requires_root() -> None:
    if _WHY_NOT is not None:
        pytest.skip(_WHY_NOT)


@pytest.fixture
def bed_name(request: pytest.FixtureRequest) -> str:
    """A testbed name no other test (or engineer) uses at the same time."""
    return f"t{os.getpid() % 10000}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def state_root(tmp_path: Path) -> Path:
    """A private state directory, so tests never see each other's (or anyone's) testbeds."""
    return tmp_path / "state"


def leftovers(name: str) -> list[str]:
    """Namespaces of testbed `name` that still exist."""
    netns = Path("/run/netns")
    return sorted(p.name for p in netns.iterdir() if p.name.startswith(f"lnet.{name}.")) if netns.exists() else []
