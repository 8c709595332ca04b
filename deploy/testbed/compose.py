"""The docker-compose testbed: the same topology file as the namespace testbed, for ordinary Linux hosts whose
kernel has netem.

One service per host, one docker network per link (10.78.K.0/24 for link K: the `a` end is .2, the `b` end .3;
docker keeps .1). Each host also holds its testbed address (10.77.0.x, the same as in the namespace testbed) on
`lo`, and reaches every other host's address over the shortest-delay route, through the hosts in between, which
forward (net.ipv4.ip_forward=1). At start each service shapes the egress of each of its link interfaces: a tbf
root qdisc for the rate (its `latency` is the link's queue, tail drop), with netem under it for the delay,
jitter and loss, so that both directions of a link are shaped like the userspace emulator's.

Pure text generation: nothing here runs docker or tc, so the output is tested by parsing it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .netns import receive_buffer_bytes
from .topology import Host, Link, Topology, TopologyError

__all__ = ["LINK_PREFIX", "HostPlan", "compose_yaml", "dockerfile", "dockerignore", "host_plan", "write_compose"]

LINK_PREFIX = "10.78"
MAX_LINKS = 250
NETEM_LIMIT_PACKETS = 100000  # netem's own queue only holds packets in flight on the wire, never tail-drops here


@dataclass(frozen=True)
class HostPlan:
    """What one compose service needs: its link addresses and the commands it runs at start."""

    host: Host
    link_addresses: dict[str, str]  # docker network name -> this host's address on it
    commands: list[str]
    sysctls: dict[str, str]


def link_network(index: int) -> str:
    return f"link{index}"


def link_subnet(index: int) -> str:
    return f"{LINK_PREFIX}.{index}.0/24"


def link_address(index: int, end: str) -> str:
    return f"{LINK_PREFIX}.{index}.{2 if end == 'a' else 3}"


def _fmt(x: float) -> str:
    return f"{x:g}"


def shaping_commands(dev: str, link: Link, mtu: int) -> list[str]:
    """tc commands shaping one direction of `link` on interface `dev` (a shell word, e.g. "$dev0")."""
    cmds = [f"tc qdisc del dev {dev} root 2>/dev/null || true"]
    netem = f"netem delay {_fmt(link.delay_ms)}ms"
    if link.jitter_ms:
        netem += f" {_fmt(link.jitter_ms)}ms"
    if link.loss:
        netem += f" loss {_fmt(link.loss * 100)}%"
    netem += f" limit {NETEM_LIMIT_PACKETS}"
    if link.rate_mbit is None:
        cmds.append(f"tc qdisc add dev {dev} root handle 1: {netem}")
        return cmds
    # tbf's burst must hold at least one packet; latency is the longest a packet may queue before tail drop
    burst = max(2 * mtu, int(link.rate_mbit * 1e6 / 8 / 250))
    cmds.append(
        f"tc qdisc add dev {dev} root handle 1: tbf rate {_fmt(link.rate_mbit)}mbit burst {burst} "
        f"latency {_fmt(link.effective_queue_ms)}ms"
    )
    cmds.append(f"tc qdisc add dev {dev} parent 1:1 handle 10: {netem}")
    return cmds


def host_plan(topology: Topology, host: Host) -> HostPlan:
    if len(topology.links) > MAX_LINKS:
        raise TopologyError(f"{len(topology.links)} links: the compose generator supports at most {MAX_LINKS}")
    index_of = {link.key: i for i, link in enumerate(topology.links)}
    addresses: dict[str, str] = {}
    commands = ["set -e", f"ip addr add {host.address}/32 dev lo"]
    for i, link in enumerate(topology.links):
        if host.name not in (link.a, link.b):
            continue
        addr = link_address(i, "a" if link.a == host.name else "b")
        addresses[link_network(i)] = addr
        dev = f"$dev{i}"
        commands.append(f"dev{i}=$(ip -o -4 addr show to {addr}/32 | awk '{{print $2}}')")
        commands.append(f"ip link set {dev} mtu {topology.mtu}")
        commands.extend(shaping_commands(dev, link, topology.mtu))
    for other in topology.hosts:
        if other is host:
            continue
        nxt = topology.next_hop(host.name, other.name)
        i = index_of[frozenset((host.name, nxt))]
        via = link_address(i, "a" if topology.links[i].a == nxt else "b")
        commands.append(f"ip route replace {other.address}/32 via {via} src {host.address}")
    commands.append('exec "$@"')
    rcvbuf = receive_buffer_bytes(host.window_bytes, topology.mtu)
    wmax = max(2 * host.window_bytes, 65536)
    sysctls = {
        "net.ipv4.ip_forward": "1",
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.default.rp_filter": "0",
        "net.ipv4.tcp_rmem": f"4096 {rcvbuf} {rcvbuf}",
        "net.ipv4.tcp_wmem": f"4096 {min(16384, wmax)} {wmax}",
        "net.ipv4.tcp_moderate_rcvbuf": "0",
        "net.ipv4.tcp_congestion_control": host.congestion,
        "net.ipv4.tcp_no_metrics_save": "1",
    }
    return HostPlan(host, addresses, commands, sysctls)


def _q(s: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(s)


def _q_shell(s: str) -> str:
    """Like _q, for text compose must pass through as is: it interpolates `$X`, and `$$` is a literal `$`."""
    return json.dumps(s.replace("$", "$$"))


def compose_yaml(topology: Topology, context: str, dockerfile_path: str, command: list[str] | None = None) -> str:
    """docker-compose.yml for the topology. `context` is the build context relative to the compose file (the
    repository root), `dockerfile_path` the Dockerfile relative to the context."""
    command = command or ["sleep", "infinity"]
    out = [
        f"# Generated by `lnet-testbed compose` from the topology {topology.name!r}; regenerate, do not edit.",
        "# Needs a kernel with netem (sch_netem) on the docker host. Run: docker compose up -d --build",
        f"name: {_q('lnet-' + topology.name)}",
        "services:",
    ]
    for host in topology.hosts:
        plan = host_plan(topology, host)
        out += [
            f"  {host.name}:",
            "    build:",
            f"      context: {_q(context)}",
            f"      dockerfile: {_q(dockerfile_path)}",
            f"    image: {_q('lnet-testbed:' + topology.name)}",
            f"    hostname: {_q(host.name)}",
            "    cap_add:",
            '      - "NET_ADMIN"',
            "    sysctls:",
        ]
        out += [f"      {k}: {_q(v)}" for k, v in plan.sysctls.items()]
        out.append("    networks:")
        for net, addr in plan.link_addresses.items():
            out += [f"      {net}:", f"        ipv4_address: {_q(addr)}"]
        out += ["    entrypoint:", '      - "sh"', '      - "-c"', f"      - {_q_shell('; '.join(plan.commands))}",
                '      - "lnet-testbed-start"']
        out.append("    command:")
        out += [f"      - {_q_shell(word)}" for word in command]
    out.append("networks:")
    for i, link in enumerate(topology.links):
        out += [
            f"  {link_network(i)}:",
            f"    # {link.a} <-> {link.b}",
            "    driver: \"bridge\"",
            "    driver_opts:",
            f"      com.docker.network.driver.mtu: {_q(str(topology.mtu))}",
            "    ipam:",
            "      config:",
            f"        - subnet: {_q(link_subnet(i))}",
        ]
    return "\n".join(out) + "\n"


def dockerfile() -> str:
    return "\n".join(
        [
            "# The lnet image for compose testbeds: lnet installed from the repository, plus iproute2 for tc and ip.",
            "FROM python:3.11-slim",
            "RUN apt-get update \\",
            " && apt-get install -y --no-install-recommends iproute2 \\",
            " && rm -rf /var/lib/apt/lists/*",
            "WORKDIR /src/lnet",
            "COPY . .",
            "RUN pip install --no-cache-dir .",
            'CMD ["sleep", "infinity"]',
            "",
        ]
    )


def dockerignore() -> str:
    """Dockerfile.dockerignore (BuildKit reads it next to the Dockerfile): keep the build context small."""
    return "\n".join([".git", ".venv", "**/__pycache__", "**/.mypy_cache", ".ruff_cache", ".pytest_cache",
                      ".hypothesis", "bench/results", ""])


def repository_root() -> Path | None:
    """The repository this package is installed from (editable installs), if it is one."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() and (root / "deploy").is_dir() else None


def write_compose(topology: Topology, out_dir: str | os.PathLike[str], context: str | os.PathLike[str] | None = None,
                  command: list[str] | None = None) -> list[Path]:
    """Write docker-compose.yml, Dockerfile and Dockerfile.dockerignore into `out_dir`; returns the files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Path(context) if context is not None else (repository_root() or out)
    rel_ctx = os.path.relpath(ctx.resolve(), out.resolve())
    rel_dockerfile = os.path.relpath((out / "Dockerfile").resolve(), ctx.resolve())
    files = [out / "docker-compose.yml", out / "Dockerfile", out / "Dockerfile.dockerignore"]
    files[0].write_text(compose_yaml(topology, rel_ctx, rel_dockerfile, command))
    files[1].write_text(dockerfile())
    files[2].write_text(dockerignore())
    return files
