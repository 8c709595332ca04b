"""Bringing testbeds up and down through the CLI and the API, and that nothing is left behind: not after `down`,
Ctrl-C, cancellation, a killed controller or a killed emulator; `up` refuses a name that is up and clears a stale
one. Root only, except the privilege check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from lnet.testbed import Testbed, TestbedStateError
from lnet.testbed.cli import main
from lnet.testbed.netns import emulator_alive

from .conftest import TOPOLOGIES, leftovers

LINE3 = str(TOPOLOGIES / "line3.toml")
root = [pytest.mark.root, pytest.mark.usefixtures("requires_root")]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(condition: object, timeout_s: float = 10.0) -> bool:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def emulator_pid(state_root: Path, name: str) -> int:
    pid = json.loads((state_root / name / "state.json").read_text())["pid"]
    assert isinstance(pid, int)
    return pid


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
def test_cli_up_status_exec_down_leaves_nothing(
    bed_name: str, state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sr = ["--state-dir", str(state_root)]
    assert main([*sr, "up", LINE3, "--name", bed_name]) == 0
    try:
        assert leftovers(bed_name) == [f"lnet.{bed_name}.{h}" for h in sorted(["src", "depot", "dst"])]
        emu = emulator_pid(state_root, bed_name)
        assert emulator_alive(emu, bed_name)  # `up` returned, the testbed stays
        # a background process on a host, which `down` must end
        assert main([*sr, "exec", "depot", "--name", bed_name, "--", "sh", "-c",
                     f"sleep 300 & echo $! > {state_root}/sleeper"]) == 0
        sleeper = int((state_root / "sleeper").read_text())
        assert pid_alive(sleeper)
        assert main([*sr, "exec", "src", "--name", bed_name, "--", "sh", "-c", "exit 7"]) == 7
        capsys.readouterr()
        assert main([*sr, "status", "--name", bed_name]) == 0
        out = capsys.readouterr().out
        assert "src          10.77.0.1" in out
        assert "src <-> depot: 10 ms one way, 50 Mbit/s" in out
        assert "emulator load:" in out
        assert main([*sr, "status", "--name", bed_name, "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert [h["address"] for h in status["hosts"]] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
        assert main([*sr, "set-link", "src", "depot", "--name", bed_name, "--loss", "0.25"]) == 0
        assert main([*sr, "set-link", "src", "depot", "--name", bed_name, "--loss", "3"]) == 2
        assert main([*sr, "exec", "nowhere", "--name", bed_name, "--", "true"]) == 2
    finally:
        assert main([*sr, "down", "--name", bed_name]) == 0
    assert leftovers(bed_name) == []
    assert not (state_root / bed_name).exists()
    assert not pid_alive(emu)
    assert wait_until(lambda: not pid_alive(sleeper), 5)
    assert main([*sr, "down", "--name", bed_name]) == 3
    assert main([*sr, "status", "--name", bed_name]) == 3


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
def test_up_refuses_a_running_name_and_clears_a_crashed_one(
    bed_name: str, state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sr = ["--state-dir", str(state_root)]
    assert main([*sr, "up", LINE3, "--name", bed_name]) == 0
    try:
        first = emulator_pid(state_root, bed_name)
        capsys.readouterr()
        assert main([*sr, "up", LINE3, "--name", bed_name]) == 3
        assert f"a testbed named {bed_name!r} is already up" in capsys.readouterr().err
        assert emulator_alive(first, bed_name)  # the refusal did not disturb it
        os.kill(first, signal.SIGKILL)  # a crash: no chance to clean up
        assert wait_until(lambda: not pid_alive(first))
        assert len(leftovers(bed_name)) == 3  # the crash left its namespaces...
        assert main([*sr, "up", LINE3, "--name", bed_name]) == 0  # ...which the next `up` clears
        second = emulator_pid(state_root, bed_name)
        assert second != first
        assert len(leftovers(bed_name)) == 3
    finally:
        assert main([*sr, "down", "--name", bed_name]) == 0
    assert leftovers(bed_name) == []


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
def test_bad_topology_builds_nothing(bed_name: str, state_root: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[hosts.a]\n[hosts.b]\n[hosts.c]\n[[links]]\na = "a"\nb = "b"\ndelay_ms = 1\n')
    assert main(["--state-dir", str(state_root), "up", str(bad), "--name", bed_name]) == 2
    assert "disconnected: c cannot be reached" in capsys.readouterr().err
    assert leftovers(bed_name) == []
    assert not (state_root / bed_name).exists()


CONTROLLER = """
import sys, trio
from pathlib import Path
from lnet.testbed import Testbed

async def main():
    async with Testbed(sys.argv[1], name=sys.argv[2], state_root=Path(sys.argv[3])) as tb:
        proc = await tb.spawn("dst", ["sleep", "300"])
        print(proc.pid, flush=True)
        await trio.sleep(300)

trio.run(main)
"""


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_controller_crash_or_interrupt_leaves_nothing(bed_name: str, state_root: Path, how: int) -> None:
    """SIGKILL: the emulator sees its parent gone and removes the testbed. SIGINT (Ctrl-C): trio raises
    KeyboardInterrupt and `async with` tears down. SIGTERM: likewise killed without clean-up code running."""
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLER, LINE3, bed_name, str(state_root)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    stdout = proc.stdout
    try:
        sleeper = int(stdout.readline())
        emu = emulator_pid(state_root, bed_name)
        assert len(leftovers(bed_name)) == 3
        proc.send_signal(how)
        proc.wait(timeout=20)
        assert wait_until(lambda: not leftovers(bed_name), 15), leftovers(bed_name)
        assert wait_until(lambda: not pid_alive(emu), 5)
        assert wait_until(lambda: not pid_alive(sleeper), 5)
        assert wait_until(lambda: not (state_root / bed_name).exists(), 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stdout.close()
        subprocess.run([sys.executable, "-m", "lnet.testbed.cli", "--state-dir", str(state_root), "down",
                        "--name", bed_name], capture_output=True, check=False)


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
async def test_api_cleans_up_on_cancellation_and_refuses_a_duplicate(bed_name: str, state_root: Path) -> None:
    with trio.move_on_after(30) as scope:
        async with Testbed(LINE3, name=bed_name, state_root=state_root) as tb:
            assert tb.hosts == ["src", "depot", "dst"]
            assert tb.address("dst") == "10.77.0.3"
            sleeper = await tb.spawn("src", ["sleep", "300"])
            with pytest.raises(TestbedStateError, match="already up"):
                async with Testbed(LINE3, name=bed_name, state_root=state_root):
                    pass
            assert len(leftovers(bed_name)) == 3  # the refused duplicate removed nothing
            scope.cancel()
            await trio.sleep(30)
    assert scope.cancelled_caught
    assert leftovers(bed_name) == []
    assert sleeper.returncode is not None
    assert not (state_root / bed_name).exists()


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
async def test_hosts_reach_each_other_only_by_testbed_address(bed_name: str, state_root: Path) -> None:
    async with Testbed(LINE3, name=bed_name, state_root=state_root) as tb:
        done = await tb.run("src", ["ip", "route", "get", tb.address("dst")])
        assert "dev lnet0" in done.stdout.decode()
        fail = await tb.run("src", ["ip", "route", "get", "8.8.8.8"], check=False)
        assert fail.returncode != 0  # no way out of the testbed


def test_without_root_the_error_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a user other than root, whoever runs the suite: the process takes uid 1000 for this check. (Dropping
    # root for real, with setpriv, cannot import lnet from a checkout only root may read, as CI's fresh clone is.)
    import lnet.testbed.netns as netns

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    state = tmp_path / "state"
    code = main(["--state-dir", str(state), "up", LINE3, "--name", "x"])
    err = capsys.readouterr().err
    assert code == 1
    assert "the testbed needs root" in err
    assert "running as uid 1000" in err
    assert not state.exists()
