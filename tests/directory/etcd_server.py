"""A real etcd on loopback for the directory's tests: a temporary data directory and free ports.

``EtcdServer`` starts ``etcd`` (the Debian ``etcd-server`` package's, 3.4), waits for it to answer, and can stop,
kill and start it again on the same ports and data (a directory that goes down and comes back). Tests that need
it are skipped, with the reason, where no ``etcd`` binary is installed (``./run test`` installs it as root).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

__all__ = ["ETCD", "EtcdServer", "free_port"]

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")  # deploy/directory/etcd-auth.sh runs it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdServer:
    def __init__(self, data_dir: Path, *, name: str = "lnet-test", tls: bool = False) -> None:
        """``tls``: serve clients over HTTPS with a certificate of a test CA (``cafile``) for 127.0.0.1."""
        assert ETCD is not None
        self.data_dir = data_dir
        self.name = name
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.client_port}"
        self.cafile: Path | None = None
        self._tls_args: list[str] = []
        if tls:
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1")
            home = data_dir.parent / f"{data_dir.name}-tls"
            home.mkdir(parents=True, exist_ok=True)
            self.cafile = home / "ca.pem"
            ca.cert_pem.write_to_path(str(self.cafile))
            cert.cert_chain_pems[0].write_to_path(str(home / "server.pem"))
            cert.private_key_pem.write_to_path(str(home / "server-key.pem"))
            self._tls_args = ["--cert-file", str(home / "server.pem"), "--key-file", str(home / "server-key.pem")]
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    def start(self, *, timeout_s: float = 20.0) -> None:
        assert ETCD is not None
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            ETCD, "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}", "--initial-cluster-state", "new",
            "--log-level", "warn", "--logger", "zap", *self._tls_args,
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited ({self.process.returncode}): {self.log_path.read_text()[-2000:]}")
            if self.healthy():
                return
            time.sleep(0.05)
        raise RuntimeError(f"etcd did not answer within {timeout_s}s")

    def healthy(self) -> bool:
        try:
            context = ssl.create_default_context(cafile=str(self.cafile)) if self.cafile else None
            with urllib.request.urlopen(self.url + "/health", timeout=1, context=context) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        """SIGTERM, then wait (etcd stops in well under a second)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def env(self) -> dict[str, str]:
        """The environment etcdctl (and deploy/directory/etcd-auth.sh) reach this server with."""
        env = {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": self.url, "PATH": "/usr/bin:/bin"}
        if self.cafile is not None:
            env["ETCDCTL_CACERT"] = str(self.cafile)
        return env

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
