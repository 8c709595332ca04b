"""Finding the compose tool and telling whether a Docker engine answers, with stand-ins for `docker` and
`docker-compose` on PATH (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnet.testbed.engine import EngineError, compose_command, engine_answers


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_the_compose_plugin_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path / "bin", "docker", '[ "$1 $2" = "compose version" ] && exit 0; exit 1')
    stand_in(tmp_path / "bin", "docker-compose", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert compose_command() == ["docker", "compose"]


def test_debian_docker_compose_where_the_plugin_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path / "bin", "docker", 'echo "docker: unknown command: docker compose" >&2; exit 1')
    stand_in(tmp_path / "bin", "docker-compose", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert compose_command() == ["docker-compose"]


def test_no_compose_tool_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path / "bin", "docker", "exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(EngineError, match="apt-get install docker-compose"):
        compose_command()


def test_engine_answers_or_says_why_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert engine_answers() == "no docker command"
    stand_in(tmp_path / "bin", "docker",
             'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert engine_answers() == "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    stand_in(tmp_path / "bin", "docker", "echo 20.10.24+dfsg1")
    assert engine_answers() is None
