"""The docker-compose testbed: the same topology file as the namespace testbed, as containers on one Docker host.

One service per host (container `lnet-TOPOLOGY-HOST`, image `lnet-testbed:latest`, which `lnet-testbed image`
builds with no image registry: `image.py`), one docker network per link (10.78.K.0/24 for link K: the `a` end
is .2, the `b` end .3; docker keeps .1). Each host also holds its testbed address (10.77.0.x, the same as in the
namespace testbed) on `lo`, and reaches every other host's address over the shortest-delay route, through the
hosts in between, which forward (net.ipv4.ip_forward=1). At start each service shapes the egress of each of its
link interfaces: a tbf root qdisc for the rate (its `latency` is the link's queue, tail drop), with netem under
it for the delay, jitter and loss, so that both directions of a link are shaped like the userspace emulator's.
Where the kernel has no netem (sch_netem), the service says so in one line on its log and runs rate-only: tbf
alone, no delay, jitter or loss. Then it runs its command: by default an lnet depot on its testbed address, port
6714, with `$LNET_DEPOTS` naming a depots file that lists every other host's depot.

Pure text generation: nothing here runs docker or tc, so the output is tested by parsing it (and, live, by
tests/testbed/test_compose_live.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .netns import receive_buffer_bytes
from .topology import HOST_PREFIX, Host, Link, Topology, TopologyError

__all__ = [
    "DEPOT_PORT",
    "DEPOTS_FILE",
    "IMAGE",
    "LINK_PREFIX",
    "NO_NETEM_LINE",
    "READY_LINE",
    "HostPlan",
    "compose_yaml",
    "container_name",
    "depot_command",
    "directory_url",
    "host_plan",
    "project_name",
    "write_compose",
]

LINK_PREFIX = "10.78"
MAX_LINKS = 250
NETEM_LIMIT_PACKETS = 100000  # netem's own queue only holds packets in flight on the wire, never tail-drops here
IMAGE = "lnet-testbed:latest"
DEPOT_PORT = 6714
DEPOTS_FILE = "/etc/lnet/depots.toml"
DEPOT_DATA_DIR = "/var/lib/lnet/depot"
NO_NETEM_LINE = ("lnet-testbed: this kernel has no netem (sch_netem), so the links are shaped for rate only (tbf)"
                 " with no delay, jitter or loss")
READY_LINE = "lnet-testbed: host ready"
ETCD_PORT = 2379
ETCD_ADDRESS = f"{LINK_PREFIX}.0.4"  # on link 0's network, beside its two hosts (.2, .3; docker keeps .1)
TESTBED_NET = f"{HOST_PREFIX}.0/24"  # every host's testbed address


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


def project_name(topology: Topology) -> str:
    """The compose project: its containers are `lnet-NAME-HOST`, its networks `lnet-NAME_linkK`."""
    return f"lnet-{topology.name}"


def container_name(topology: Topology, host: str) -> str:
    return f"{project_name(topology)}-{host}"


def depot_command(host: Host, *, directory: bool = False) -> list[str]:
    """The default command of a host's service: an lnet depot on its testbed address (registered in the
    testbed's depot directory, with ``directory``)."""
    registered = ["--directory", directory_url()] if directory else []
    return ["lnet-depot", "--listen", f"{host.address}:{DEPOT_PORT}", "--name", host.name, "--data-dir",
            DEPOT_DATA_DIR, "--log-level", "warning", *registered]


def directory_url() -> str:
    """The depot directory's etcd, when the testbed has one: its own service on link 0, beside that link's `a`
    host (docs/directory.md)."""
    return f"http://{ETCD_ADDRESS}:{ETCD_PORT}"


def etcd_service(topology: Topology, image: str) -> list[str]:
    """The `etcd` service's lines: etcd (Debian's etcd-server, in the image) on link 0's network at
    ``ETCD_ADDRESS``, routing the testbed addresses through link 0's `a` host, which forwards."""
    gateway = link_address(0, "a")
    url = directory_url()
    peer = f"http://127.0.0.1:{ETCD_PORT + 1}"
    commands = ["set -e", f"ip route replace {TESTBED_NET} via {gateway}", 'exec "$@"']
    argv = ["etcd", "--name", "etcd", "--data-dir", "/var/lib/etcd/lnet", "--listen-client-urls", url,
            "--advertise-client-urls", url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"etcd={peer}", "--log-level", "warn", "--logger", "zap"]
    out = [
        "  etcd:",
        f"    # the depot directory: every depot registers here, clients find them here ({url})",
        f"    image: {_q(image)}",
        f"    container_name: {_q(container_name(topology, 'etcd'))}",
        '    hostname: "etcd"',
        "    cap_add:",
        '      - "NET_ADMIN"',
        "    networks:",
        f"      {link_network(0)}:",
        f"        ipv4_address: {_q(ETCD_ADDRESS)}",
        "    entrypoint:", '      - "sh"', '      - "-c"', f"      - {_q_shell('; '.join(commands))}",
        '      - "lnet-testbed-start"',
        "    command:",
    ]
    return out + [f"      - {_q_shell(word)}" for word in argv]


def _netem_probe() -> list[str]:
    """Shell lines that set $netem to 1 where the kernel has netem, else 0 after saying so in one line."""
    return [
        "netem=1",
        "tc qdisc add dev lo root handle 1: netem delay 0ms 2>/dev/null || netem=0",
        "[ $netem = 0 ] || tc qdisc del dev lo root",
        f"[ $netem = 1 ] || echo {_sh_quote(NO_NETEM_LINE)} >&2",
    ]


def _sh_quote(s: str) -> str:
    assert "'" not in s
    return f"'{s}'"


def host_plan(topology: Topology, host: Host, *, directory: bool = False) -> HostPlan:
    """``directory``: the testbed has a depot directory (``etcd_service``): every host routes to it, and its depots
    file names it."""
    if len(topology.links) > MAX_LINKS:
        raise TopologyError(f"{len(topology.links)} links: the compose generator supports at most {MAX_LINKS}")
    index_of = {link.key: i for i, link in enumerate(topology.links)}
    addresses: dict[str, str] = {}
    commands = ["set -e", *_netem_probe(), f"ip addr replace {host.address}/32 dev lo"]
    for i, link in enumerate(topology.links):
        if host.name not in (link.a, link.b):
            continue
        addr = link_address(i, "a" if link.a == host.name else "b")
        addresses[link_network(i)] = addr
        dev = f"$dev{i}"
        commands.append(f"dev{i}=$(ip -o -4 addr show to {addr}/32 | awk '{{print $2}}')")
        commands.append(f"ip link set {dev} mtu {topology.mtu}")
        for line in shaping_commands(dev, link, topology.mtu):
            # without netem: tbf alone (rate-only); a link with no rate is then not shaped at all
            commands.append(f"[ $netem = 0 ] || {line}" if " netem " in line else line)
    for other in topology.hosts:
        if other is host:
            continue
        nxt = topology.next_hop(host.name, other.name)
        i = index_of[frozenset((host.name, nxt))]
        via = link_address(i, "a" if topology.links[i].a == nxt else "b")
        commands.append(f"ip route replace {other.address}/32 via {via} src {host.address}")
    gateway = topology.links[0].a if topology.links else None
    if directory and gateway is not None and host.name not in (gateway, topology.links[0].b):
        nxt = topology.next_hop(host.name, gateway)
        i = index_of[frozenset((host.name, nxt))]
        via = link_address(i, "a" if topology.links[i].a == nxt else "b")
        commands.append(f"ip route replace {ETCD_ADDRESS}/32 via {via} src {host.address}")
    depots = [f'here = "{host.name}"']
    if directory:
        depots.append(f'directory = "{directory_url()}"')
    for other in topology.hosts:
        if other is not host:
            depots += [f"[depots.{other.name}]", f'url = "http://{other.address}:{DEPOT_PORT}"']
    commands.append(f"mkdir -p {os.path.dirname(DEPOTS_FILE)}")
    commands.append("printf '%s\\n' " + " ".join(_sh_quote(line) for line in depots) + f" > {DEPOTS_FILE}")
    commands.append(f"echo {_sh_quote(READY_LINE)} >&2")
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


def compose_yaml(
    topology: Topology, command: list[str] | None = None, image: str = IMAGE, *, directory: bool = False
) -> str:
    """docker-compose.yml for the topology. `command` replaces every service's default (an lnet depot);
    ``directory`` adds the `etcd` service of a depot directory, where the depots register."""
    if directory and not topology.links:
        raise TopologyError("a depot directory needs a link to sit on")
    project = project_name(topology)
    out = [
        f"# Generated by `lnet-testbed compose` from the topology {topology.name!r}; regenerate, do not edit.",
        f"# Image: `lnet-testbed image` builds {image} (no registry needed). Up and down:",
        f"#   lnet-testbed compose deploy/topologies/{topology.name}.toml{' --directory' * directory} --up / --down",
        f"#   or docker-compose -p {project} -f THIS_FILE up -d / down (docker compose ... where it is installed)",
        "# Where the kernel has no netem, each service says so in one line on its log and runs rate-only (tbf).",
        "# No top-level `name:` (Debian's docker-compose 1.29 refuses it): the project name is given with -p.",
        "services:",
    ]
    for host in topology.hosts:
        plan = host_plan(topology, host, directory=directory)
        out += [
            f"  {host.name}:",
            f"    image: {_q(image)}",
            f"    container_name: {_q(container_name(topology, host.name))}",
            f"    hostname: {_q(host.name)}",
            "    cap_add:",
            '      - "NET_ADMIN"',
            "    sysctls:",
        ]
        out += [f"      {k}: {_q(v)}" for k, v in plan.sysctls.items()]
        out += ["    environment:", f"      LNET_DEPOTS: {_q(DEPOTS_FILE)}"]
        out.append("    networks:")
        for net, addr in plan.link_addresses.items():
            out += [f"      {net}:", f"        ipv4_address: {_q(addr)}"]
        out += ["    entrypoint:", '      - "sh"', '      - "-c"', f"      - {_q_shell('; '.join(plan.commands))}",
                '      - "lnet-testbed-start"']
        out.append("    command:")
        out += [f"      - {_q_shell(word)}" for word in (command or depot_command(host, directory=directory))]
    if directory:
        out += etcd_service(topology, image)
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


def write_compose(topology: Topology, out_dir: str | os.PathLike[str], command: list[str] | None = None,
                  image: str = IMAGE, *, directory: bool = False) -> list[Path]:
    """Write docker-compose.yml into `out_dir`; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "docker-compose.yml"
    path.write_text(compose_yaml(topology, command, image, directory=directory))
    return [path]
