"""The compose testbed's image, built with no image registry.

Two layers, both cached:

- **The base** `lnet-testbed-base:SUITE-KEY`: a minimal Debian root filesystem made with `debootstrap` from the
  package mirror apt already uses on this machine (the first `deb` source of the suite in /etc/apt), with
  python3, python3-venv and iproute2, imported with `docker import`. KEY hashes the suite, mirror, architecture
  and package list, so a change to any of them makes a new base; nothing else does. It is kept (`compose --down`
  leaves it); remove it with `docker image rm` to rebuild. Where a registry is reachable, `--base IMAGE` uses
  that image instead (it needs python3 with venv; iproute2 is installed with apt-get if `ip` or `tc` is missing).
- **The image** `lnet-testbed:latest`: the base plus a virtual environment /opt/lnet (first on PATH) holding
  lnet, built as a wheel from this checkout, and its dependencies, downloaded from the Python package index on
  this machine into a wheelhouse under the cache directory and installed in the container with `--no-index`.
  It is labelled with a digest of the checkout's sources (pyproject.toml, README.md and the package
  directories) and the base's image ID, and rebuilt only when either changes.

The container that installs lnet is committed with `docker commit`; no Dockerfile, no registry, no BuildKit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .compose import IMAGE
from .engine import EngineError, docker

__all__ = ["BASE_PACKAGES", "BASE_REPOSITORY", "CACHE_DIR", "BuiltImage", "ImageError", "apt_mirror", "base_tag",
           "build_image", "debootstrap_base", "host_suite", "repository_root", "source_digest", "source_files"]

BASE_REPOSITORY = "lnet-testbed-base"
BASE_PACKAGES = ("python3", "python3-venv", "iproute2", "etcd-server")  # etcd: the depot directory's service
CACHE_DIR = Path(os.environ.get("LNET_TESTBED_CACHE", "/var/cache/lnet-testbed"))
VENV = "/opt/lnet"
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LABEL_SOURCE = "org.lnet.source"
LABEL_BASE = "org.lnet.base"
DEBOOTSTRAP_TIMEOUT_S = 1800.0
PIP_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 600.0

Log = Callable[[str], None]


class ImageError(Exception):
    """The image cannot be built; the message says why."""


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    base: str
    built: bool  # False: the image on hand was already current
    seconds: float


# -- pure parts -------------------------------------------------------------------------------------------------


def apt_mirror(sources: Iterable[tuple[str, str]], suite: str) -> str:
    """The URI of the first `deb` source of `suite` among apt's source files, given as (file name, text): deb822
    `.sources` files and one-line `.list` files. Raises ImageError if there is none."""
    for name, text in sources:
        if name.endswith(".sources"):
            for para in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in para.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
                    uris = fields.get("uris", "").split()
                    if uris:
                        return uris[0].rstrip("/")
        elif name.endswith(".list"):
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1].rstrip("/")
    raise ImageError(f"apt has no `deb` source for the suite {suite!r} (looked in /etc/apt): give --mirror URL")


def host_suite(os_release: str) -> str:
    """VERSION_CODENAME from /etc/os-release's text."""
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME" and value.strip('"'):
            return value.strip('"')
    raise ImageError("/etc/os-release names no VERSION_CODENAME: give --suite NAME")


def base_tag(suite: str, mirror: str, arch: str, packages: Iterable[str] = BASE_PACKAGES) -> str:
    key = hashlib.sha256("\n".join([suite, mirror, arch, *sorted(packages)]).encode()).hexdigest()[:12]
    return f"{BASE_REPOSITORY}:{suite}-{key}"


def repository_root() -> Path | None:
    """The checkout this package runs from (an editable install), if it is one."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() and (root / "deploy").is_dir() else None


def source_files(root: Path) -> list[Path]:
    """What the lnet wheel is built from, relative to `root`: pyproject.toml, its readme, the package dirs."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    files = [Path("pyproject.toml")]
    readme = project.get("project", {}).get("readme")
    if isinstance(readme, str):
        files.append(Path(readme))
    for directory in sorted(set(project.get("tool", {}).get("setuptools", {}).get("package-dir", {}).values())):
        for path in sorted((root / directory).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path.relative_to(root))
    return files


def source_digest(root: Path) -> str:
    h = hashlib.sha256()
    for rel in source_files(root):
        data = (root / rel).read_bytes()
        h.update(f"{rel.as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


def dependencies(root: Path) -> list[str]:
    deps = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("dependencies", [])
    return [str(d) for d in deps]


def install_script(wheel: str) -> str:
    """What runs in the base container to install lnet (the wheel under /lnet, its dependencies in /wheels)."""
    return "; ".join([
        "set -e",
        "if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then apt-get update"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2"
        " && rm -rf /var/lib/apt/lists/*; fi",
        f"python3 -m venv {VENV}",
        f"{VENV}/bin/pip install --quiet --no-cache-dir --disable-pip-version-check --no-index"
        f" --find-links /wheels /lnet/{wheel}",
        f"{VENV}/bin/lnet-depot --version",
        f"{VENV}/bin/python -c 'import lnet.client.send, lnet.client.get, lnet.testbed.probe'",
    ])


# -- the I/O shell ----------------------------------------------------------------------------------------------


def _run(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what} did not finish within {timeout_s:g} s") from None
    except FileNotFoundError:
        raise ImageError(f"{what}: no {argv[0]} command") from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.decode(errors="replace").strip().splitlines()[-6:])
        raise ImageError(f"{what} failed ({done.returncode}): {tail}")
    return done


def _image_id(ref: str) -> str | None:
    done = docker(["image", "inspect", "--format", "{{.Id}}", ref], check=False, timeout_s=60)
    if done.returncode != 0:
        return None
    return done.stdout.decode().strip() or None


def _labels(ref: str) -> dict[str, str]:
    done = docker(["image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL_SOURCE}"}}}} '
                   f'{{{{index .Config.Labels "{LABEL_BASE}"}}}}', ref], check=False, timeout_s=60)
    if done.returncode != 0:
        return {}
    words = done.stdout.decode().split()
    return dict(zip((LABEL_SOURCE, LABEL_BASE), words, strict=False))


def debootstrap_base(*, suite: str | None = None, mirror: str | None = None, cache_dir: Path = CACHE_DIR,
                     log: Log = print) -> str:
    """The debootstrapped base image's tag, made and imported first if it is not there."""
    suite = suite or host_suite(Path("/etc/os-release").read_text())
    if mirror is None:
        apt = Path("/etc/apt")
        files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
        mirror = apt_mirror(((f.name, f.read_text(errors="replace")) for f in files if f.is_file()), suite)
    arch = _run(["dpkg", "--print-architecture"], 30, "dpkg --print-architecture").stdout.decode().strip()
    tag = base_tag(suite, mirror, arch)
    if _image_id(tag):
        return tag
    if shutil.which("mmdebstrap") is not None:
        _mmdebstrap(tag, suite, mirror, cache_dir, log)
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageError("no mmdebstrap or debootstrap command: apt-get install mmdebstrap")
    target = cache_dir / f"rootfs-{tag.split(':')[1]}"
    shutil.rmtree(target, ignore_errors=True)  # a partial one from an interrupted run
    target.parent.mkdir(parents=True, exist_ok=True)
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
    helptext = subprocess.run(["debootstrap", "--help"], capture_output=True, timeout=30, check=False).stdout
    if b"--cache-dir" in helptext:
        (cache_dir / "debs").mkdir(parents=True, exist_ok=True)
        argv.append(f"--cache-dir={cache_dir / 'debs'}")
    argv += [suite, str(target), mirror]
    log(f"debootstrap {suite} from {mirror} into {target} (a few minutes, once)")
    started = time.monotonic()
    try:
        _run(argv, DEBOOTSTRAP_TIMEOUT_S, "debootstrap")
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (target / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        log(f"debootstrap done in {time.monotonic() - started:.0f} s; docker import as {tag}")
        with subprocess.Popen(["tar", "-C", str(target), "--numeric-owner", "-cf", "-", "."],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as tar:
            try:
                imported = subprocess.run(["docker", "import", "--change", f"ENV PATH={PATH}", "-", tag],
                                          stdin=tar.stdout, capture_output=True, timeout=600, check=False)
            finally:
                assert tar.stdout is not None
                tar.stdout.close()
            tar.wait(timeout=60)
        if imported.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import failed: {imported.stderr.decode(errors='replace').strip()}")
    finally:
        shutil.rmtree(target, ignore_errors=True)
    return tag


def _mmdebstrap(tag: str, suite: str, mirror: str, cache_dir: Path, log: Log) -> None:
    """The same minimal root filesystem as debootstrap's, made by mmdebstrap straight into a tarball: about ten
    times faster here (33 s against 331 s for bookworm with python3: it downloads in parallel and unpacks with
    apt), which is what keeps a fresh CI machine's first run of the suite within its time."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    tarball = cache_dir / f"rootfs-{tag.split(':')[1]}.tar"
    argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(tarball), mirror]
    log(f"mmdebstrap {suite} from {mirror} (about a minute, once)")
    started = time.monotonic()
    try:
        _run(argv, DEBOOTSTRAP_TIMEOUT_S, "mmdebstrap")  # it leaves no apt lists or archives behind
        log(f"mmdebstrap done in {time.monotonic() - started:.0f} s; docker import as {tag}")
        imported = subprocess.run(["docker", "import", "--change", f"ENV PATH={PATH}", str(tarball), tag],
                                  capture_output=True, timeout=600, check=False, stdin=subprocess.DEVNULL)
        if imported.returncode != 0:
            raise ImageError(f"docker import failed: {imported.stderr.decode(errors='replace').strip()}")
    finally:
        tarball.unlink(missing_ok=True)


def _wheelhouse(root: Path, python: str, cache_dir: Path, log: Log) -> Path:
    house = cache_dir / "wheels" / f"py{python}"
    house.mkdir(parents=True, exist_ok=True)
    deps = dependencies(root)
    log(f"fetching {len(deps)} dependencies' wheels for Python {python} into {house}")
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
          "--python-version", python, "--dest", str(house), *deps], PIP_TIMEOUT_S, "pip download")
    return house


def _lnet_wheel(root: Path, out: Path) -> str:
    """Build lnet's wheel from a copy of the checkout's sources (so nothing is written into the checkout)."""
    with tempfile.TemporaryDirectory(prefix="lnet-src-") as tmp:
        for rel in source_files(root):
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, Path(tmp) / rel)
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                "--wheel-dir", str(out), tmp]
        try:
            _run(argv, PIP_TIMEOUT_S, "building lnet's wheel")
        except ImageError:  # seen once here: its build environment's download failed; a second try is cheap
            _run(argv, PIP_TIMEOUT_S, "building lnet's wheel")
    wheels = sorted(p.name for p in out.glob("lnet-*.whl"))
    if len(wheels) != 1:
        raise ImageError(f"building lnet's wheel left {wheels}")
    return wheels[0]


def build_image(root: Path | None = None, *, base: str | None = None, tag: str = IMAGE, cache_dir: Path = CACHE_DIR,
                suite: str | None = None, mirror: str | None = None, rebuild: bool = False,
                log: Log = print) -> BuiltImage:
    """Make `tag` current: lnet from the checkout at `root` on the base (debootstrapped unless `base` names an
    image). Does nothing when the image on hand already has this checkout's digest and this base."""
    started = time.monotonic()
    root = root or repository_root()
    if root is None:
        raise ImageError("lnet is not running from a checkout: give --source DIR (the repository)")
    try:
        base_ref = base or debootstrap_base(suite=suite, mirror=mirror, cache_dir=cache_dir, log=log)
        base_id = _image_id(base_ref)
        if base_id is None:
            log(f"pulling {base_ref}")
            docker(["pull", base_ref], timeout_s=900)
            base_id = _image_id(base_ref)
            if base_id is None:
                raise ImageError(f"no image {base_ref} after pulling it")
        digest = source_digest(root)
        old_id = _image_id(tag)
        if not rebuild and _labels(tag) == {LABEL_SOURCE: digest, LABEL_BASE: base_id}:
            return BuiltImage(tag, base_ref, False, time.monotonic() - started)
        python = docker(["run", "--rm", "--entrypoint", "python3", base_ref, "-c",
                         "import sys; print('%d.%d' % sys.version_info[:2])"], timeout_s=120).stdout.decode().strip()
        house = _wheelhouse(root, python, cache_dir, log)
        with tempfile.TemporaryDirectory(prefix="lnet-wheel-") as out:
            wheel = _lnet_wheel(root, Path(out))
            log(f"installing {wheel} into {VENV} on {base_ref}")
            container = f"lnet-testbed-build-{uuid.uuid4().hex[:8]}"
            try:
                # the debootstrapped base has iproute2 and needs no network; another base may need apt-get
                network = ["--network", "none"] if base is None else []
                docker(["run", "--name", container, *network, "-v", f"{house}:/wheels:ro", "-v", f"{out}:/lnet:ro",
                        "--entrypoint", "sh", base_ref, "-c", install_script(wheel)], timeout_s=INSTALL_TIMEOUT_S)
                docker(["commit", "--change", f"ENV PATH={PATH}", "--change", 'ENTRYPOINT []',
                        "--change", 'CMD ["sleep", "infinity"]',
                        "--change", f"LABEL {LABEL_SOURCE}={digest} {LABEL_BASE}={base_id}", container, tag])
            finally:
                docker(["rm", "-f", container], check=False, timeout_s=60)
        if old_id and old_id != _image_id(tag):
            docker(["image", "rm", old_id], check=False, timeout_s=60)  # not left dangling; kept if in use
    except EngineError as exc:
        raise ImageError(str(exc)) from None
    return BuiltImage(tag, base_ref, True, time.monotonic() - started)
