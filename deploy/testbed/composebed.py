"""Bringing a generated compose testbed up and down on this machine's Docker engine (`lnet-testbed compose
--up/--down`): write the compose file, make sure the image is current (`image.py`), `up -d` with the compose
tool on hand, wait until every host has shaped its links and started its command, and take it all down again
leaving no container, network or image behind but the cached base.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .compose import IMAGE, NO_NETEM_LINE, READY_LINE, container_name, project_name, write_compose
from .engine import EngineError, compose_command, docker
from .topology import Topology

__all__ = ["READY_LINE", "ComposeBed", "compose_down", "compose_up", "leftovers"]

READY_TIMEOUT_S = 90.0
COMPOSE_TIMEOUT_S = 300.0

Log = Callable[[str], None]


@dataclass(frozen=True)
class ComposeBed:
    topology: Topology
    file: Path
    project: str
    netem: bool  # False: the kernel has no netem and the links are rate-only

    def container(self, host: str) -> str:
        return container_name(self.topology, host)


def _compose(file: Path, project: str, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    argv = [*compose_command(), "-p", project, "-f", str(file), *args]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=COMPOSE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"`{' '.join(argv)}` did not finish within {COMPOSE_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.decode(errors="replace").strip().splitlines()[-8:])
        raise EngineError(f"`{' '.join(argv)}` failed ({done.returncode}): {tail}")
    return done


def _logs(container: str) -> str:
    done = docker(["logs", container], check=False, timeout_s=30)
    return (done.stdout + done.stderr).decode(errors="replace")


def _state(container: str) -> str:
    done = docker(["inspect", "--format", "{{.State.Status}}", container], check=False, timeout_s=30)
    return done.stdout.decode().strip() if done.returncode == 0 else "missing"


def leftovers(project: str) -> dict[str, list[str]]:
    """The containers and networks of compose project `project` that exist."""
    label = f"label=com.docker.compose.project={project}"
    containers = docker(["ps", "-a", "--filter", label, "--format", "{{.Names}}"], timeout_s=30)
    networks = docker(["network", "ls", "--filter", label, "--format", "{{.Name}}"], timeout_s=30)
    return {"containers": containers.stdout.decode().split(), "networks": networks.stdout.decode().split()}


def compose_up(topology: Topology, out_dir: Path, *, command: list[str] | None = None, image: str = IMAGE,
               log: Log = print, directory: bool = False) -> ComposeBed:
    """Write the compose file into `out_dir` and bring it up (the image must exist); wait until every host is
    ready (links shaped, routes set; with the default command, its depot serving). On failure, takes down what
    came up and raises EngineError with the failing host's log."""
    file = write_compose(topology, out_dir, command, image, directory=directory)[0]
    project = project_name(topology)
    if docker(["image", "inspect", image], check=False, timeout_s=60).returncode != 0:
        raise EngineError(f"no image {image}: build it first with `lnet-testbed image`")
    _compose(file, project, ["up", "-d", "--no-build", "--remove-orphans"])
    wanted = [READY_LINE] + (["serving on"] if command is None else [])
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        for host in topology.hosts:
            name = container_name(topology, host.name)
            while True:
                logs = _logs(name)
                if all(w in logs for w in wanted):
                    break
                state = _state(name)
                if state not in ("running", "created", "restarting"):
                    raise EngineError(f"host {host.name} ({name}) is {state}: {' | '.join(logs.splitlines()[-8:])}")
                if time.monotonic() > deadline:
                    raise EngineError(f"host {host.name} ({name}) not ready within {READY_TIMEOUT_S:g} s: "
                                      f"{' | '.join(logs.splitlines()[-8:])}")
                time.sleep(0.3)
    except EngineError:
        compose_down(topology, out_dir, remove_image=False, log=lambda _: None)
        raise
    netem = not any(NO_NETEM_LINE in _logs(container_name(topology, h.name)) for h in topology.hosts)
    if not netem:
        log(NO_NETEM_LINE)
    return ComposeBed(topology, file, project, netem)


def compose_down(topology: Topology, out_dir: Path | None, *, remove_image: bool = True, image: str = IMAGE,
                 log: Log = print) -> dict[str, list[str]]:
    """Take the testbed down: compose down (if its file is there), then remove whatever of its containers and
    networks is still there, then (`remove_image`) the lnet image unless a container still uses it; the base
    image stays. Returns what is left of the project (nothing, normally)."""
    project = project_name(topology)
    file = out_dir / "docker-compose.yml" if out_dir is not None else None
    if file is not None and file.exists():
        try:
            _compose(file, project, ["down", "--remove-orphans", "--volumes", "--timeout", "5"])
        except EngineError as exc:  # what it left is removed below
            log(f"compose down failed, removing the project's containers and networks directly: {exc}")
    left = leftovers(project)
    if left["containers"]:
        docker(["rm", "-f", *left["containers"]], check=False, timeout_s=120)
    if left["networks"]:
        docker(["network", "rm", *left["networks"]], check=False, timeout_s=60)
    if remove_image and docker(["image", "inspect", image], check=False, timeout_s=60).returncode == 0:
        users = docker(["ps", "-a", "--filter", f"ancestor={image}", "--format", "{{.Names}}"], timeout_s=30)
        if users.stdout.strip():
            log(f"kept the image {image}: in use by {' '.join(users.stdout.decode().split())}")
        else:
            docker(["image", "rm", image], timeout_s=120)
    return leftovers(project)
