"""The Docker engine the compose testbed runs on: find it, start `dockerd` if it is installed but not running,
install it from Debian's packages if asked to, and run `docker` commands with a bound on every wait.

Everything here needs root. `docker_run` and friends raise `EngineError` with the command's own message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEBIAN_PACKAGES", "DOCKERD_LOG", "EngineError", "EngineState", "compose_command", "docker",
           "ensure_engine", "engine_answers", "stop_dockerd"]

DEBIAN_PACKAGES = ("docker.io", "docker-compose", "mmdebstrap", "debootstrap")
DOCKERD_LOG = Path("/var/log/lnet-testbed-dockerd.log")
DOCKERD_PIDFILE = Path("/var/run/docker.pid")
DOCKERD_START_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 900.0
DOCKER_TIMEOUT_S = 300.0

Log = Callable[[str], None]


class EngineError(Exception):
    """Docker cannot be used here, or a docker command failed; the message says which and why."""


@dataclass(frozen=True)
class EngineState:
    started_pid: int | None  # the dockerd this process started, if it started one
    installed: tuple[str, ...]  # the Debian packages it installed


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


def docker(args: Sequence[str], *, timeout_s: float = DOCKER_TIMEOUT_S, check: bool = True,
           input_bytes: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `docker ARGS...`, bounded by `timeout_s`; raises EngineError with its stderr when it fails."""
    argv = ["docker", *args]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False, input=input_bytes,
                              stdin=None if input_bytes is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"`{' '.join(argv[:4])} ...` did not finish within {timeout_s:g} s") from None
    except FileNotFoundError:
        raise EngineError("no docker command: apt-get install docker.io") from None
    if check and done.returncode != 0:
        raise EngineError(f"`{' '.join(argv[:6])}` failed ({done.returncode}): "
                          f"{_tail(done.stderr.decode(errors='replace'))}")
    return done


def engine_answers() -> str | None:
    """None if a Docker engine answers, else why not (the client's own words)."""
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              timeout=20, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "`docker version` did not answer within 20 s"
    if done.returncode != 0:
        return _tail(done.stderr.decode(errors="replace"), 2) or f"`docker version` exited {done.returncode}"
    return None


def _install(log: Log) -> tuple[str, ...]:
    commands = ("dockerd", "docker-compose", "mmdebstrap", "debootstrap")
    missing = [p for p, cmd in zip(DEBIAN_PACKAGES, commands, strict=True) if shutil.which(cmd) is None]
    if not missing:
        return ()
    log(f"installing {', '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *missing]):
        try:
            done = subprocess.run(argv, capture_output=True, timeout=INSTALL_TIMEOUT_S, check=False, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EngineError(f"`{' '.join(argv)}` did not finish within {INSTALL_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            raise EngineError(f"`{' '.join(argv)}` failed: {_tail(done.stderr.decode(errors='replace'))}")
    return tuple(missing)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not: nobody may reap a daemon's corpse in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_dockerd(log: Log) -> int:
    """Start dockerd detached from this process (its own session, so it outlives a CLI call); its pid."""
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with DOCKERD_LOG.open("ab") as out:
        subprocess.run(["setsid", "-f", "dockerd"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                       check=True, timeout=30)
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
    while engine_answers() is not None:
        if time.monotonic() > deadline:
            raise EngineError(f"dockerd did not answer within {DOCKERD_START_TIMEOUT_S:g} s: "
                              f"{_tail(DOCKERD_LOG.read_text(errors='replace'))}")
        time.sleep(0.5)
    try:
        return int(DOCKERD_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        raise EngineError(f"dockerd answers but wrote no pid to {DOCKERD_PIDFILE}") from None


def ensure_engine(*, install: bool = False, log: Log = print) -> EngineState:
    """Make sure a Docker engine answers: start dockerd if it is installed and not running; with `install`,
    first install Debian's docker.io, docker-compose, mmdebstrap and debootstrap where they are missing. Raises
    EngineError with the reason when Docker cannot run here."""
    if os.geteuid() != 0:
        raise EngineError(f"needs root (the Docker engine, debootstrap); running as uid {os.geteuid()}")
    installed = _install(log) if install else ()
    if engine_answers() is None:
        return EngineState(None, installed)
    if shutil.which("dockerd") is None:
        raise EngineError("no Docker engine answers and dockerd is not installed: apt-get install docker.io")
    return EngineState(_start_dockerd(log), installed)


def stop_dockerd(pid: int, timeout_s: float = 30.0) -> None:
    """Stop a dockerd that ensure_engine started (its containers stop with it; images stay on disk)."""
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            return
        time.sleep(0.2)


def compose_command() -> list[str]:
    """The compose tool: `docker compose` (the plugin) where it answers, else Debian's `docker-compose`."""
    try:
        plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20, check=False,
                                stdin=subprocess.DEVNULL)
        if plugin.returncode == 0:
            return ["docker", "compose"]
    except (FileNotFoundError, subprocess.TimeoutExpired):
        pass
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise EngineError("no compose tool: neither `docker compose` nor `docker-compose` (apt-get install docker-compose)")
