"""The image builder's pure parts: which mirror and suite debootstrap uses, the base's cache key, and the digest
that decides whether the lnet image is current. (Building it for real: test_compose_live.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lnet.testbed.image import (
    ImageError,
    apt_mirror,
    base_tag,
    host_suite,
    install_script,
    source_digest,
    source_files,
)

from .conftest import REPO

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.example.org/debian
Suites: bookworm
Components: main

Enabled: no
Types: deb
URIs: http://disabled.example.org/debian
Suites: bookworm

Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian/
Suites: bookworm bookworm-updates
Components: main
"""


def test_mirror_from_deb822_skips_sources_disabled_and_other_suites() -> None:
    assert apt_mirror([("debian.sources", DEB822)], "bookworm") == "http://deb.debian.org/debian"
    assert apt_mirror([("debian.sources", DEB822)], "bookworm-security") == "http://deb.debian.org/debian-security"


def test_mirror_from_one_line_lists_and_the_first_file_wins() -> None:
    lists = [
        ("sources.list", "# deb http://old.example.org/debian bookworm main\n"
                         "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example.org/debian bookworm main\n"),
        ("debian.sources", DEB822),
    ]
    assert apt_mirror(lists, "bookworm") == "http://mirror.example.org/debian"


def test_no_source_for_the_suite_says_what_to_do() -> None:
    with pytest.raises(ImageError, match="--mirror URL"):
        apt_mirror([("debian.sources", DEB822), ("x.list", "deb http://a.example/debian trixie main\n")], "sid")


def test_suite_from_os_release() -> None:
    assert host_suite('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n') == "bookworm"
    with pytest.raises(ImageError, match="--suite"):
        host_suite("ID=debian\n")


def test_base_tag_keys_on_suite_mirror_arch_and_packages() -> None:
    tag = base_tag("bookworm", "http://deb.debian.org/debian", "amd64")
    assert tag.startswith("lnet-testbed-base:bookworm-")
    assert tag == base_tag("bookworm", "http://deb.debian.org/debian", "amd64")
    others = {base_tag("trixie", "http://deb.debian.org/debian", "amd64"),
              base_tag("bookworm", "http://mirror.example.org/debian", "amd64"),
              base_tag("bookworm", "http://deb.debian.org/debian", "arm64"),
              base_tag("bookworm", "http://deb.debian.org/debian", "amd64", ["python3", "iproute2", "curl"])}
    assert tag not in others
    assert len(others) == 4


def _copy_checkout(dst: Path) -> Path:
    for rel in source_files(REPO):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dst / rel)
    return dst


def test_source_files_are_what_the_wheel_is_built_from() -> None:
    files = {p.as_posix() for p in source_files(REPO)}
    assert {"pyproject.toml", "README.md", "deploy/testbed/compose.py", "client/send.py", "depot/cli.py",
            "scheduler/__init__.py", "deploy/testbed/py.typed"} <= files
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    assert not any(f.startswith(("tests/", "bench/", "docs/", "deploy/topologies/")) for f in files)


def test_digest_follows_sources_not_caches(tmp_path: Path) -> None:
    root = _copy_checkout(tmp_path / "co")
    before = source_digest(root)
    (root / "client" / "__pycache__").mkdir(exist_ok=True)
    (root / "client" / "__pycache__" / "send.cpython-311.pyc").write_bytes(b"\0")
    (root / "tests").mkdir()
    (root / "tests" / "new_test.py").write_text("x = 1\n")
    assert source_digest(root) == before
    with (root / "depot" / "cli.py").open("a") as f:
        f.write("\n# a change\n")
    assert source_digest(root) != before


def test_install_script_installs_offline_and_checks_the_commands() -> None:
    script = install_script("lnet-0.1.0-py3-none-any.whl").split("; ")
    assert script[0] == "set -e"
    assert "python3 -m venv /opt/lnet" in script
    assert ("/opt/lnet/bin/pip install --quiet --no-cache-dir --disable-pip-version-check --no-index "
            "--find-links /wheels /lnet/lnet-0.1.0-py3-none-any.whl") in script
    assert "/opt/lnet/bin/lnet-depot --version" in script
