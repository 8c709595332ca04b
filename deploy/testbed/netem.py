"""The kernel backend, for machines whose kernel has the netem qdisc: one veth pair per link, tc netem (delay,
jitter, loss) under tbf (rate, bounded queue) on each end's egress, and routes through the hosts in between,
which forward. The same addressing and the same tc commands as the compose testbed (`compose.py`).

Only plans and runs commands; the emulator process (`emulator.py`) owns the namespaces either way, so clean-up
is the same for both backends.
"""

from __future__ import annotations

import subprocess
import uuid

from .compose import link_address, shaping_commands
from .netns import TestbedError, namespace_name
from .topology import Link, Topology

__all__ = ["kernel_has_netem", "link_devices", "plan_commands", "reshape_commands"]

_netem_known: bool | None = None


def kernel_has_netem() -> bool:
    """Whether a netem qdisc can be made here (tried once, in a scratch namespace)."""
    global _netem_known
    if _netem_known is None:
        ns = f"lnet-netem-probe-{uuid.uuid4().hex[:8]}"
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True, check=False).returncode != 0:
            return False
        try:
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], capture_output=True, check=False)
            tried = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                                   capture_output=True, check=False)
            _netem_known = tried.returncode == 0
        finally:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    return _netem_known


def link_devices(index: int) -> tuple[str, str]:
    """The veth names of link `index` at its `a` and `b` ends (each inside its own host's namespace)."""
    return f"lk{index}a", f"lk{index}b"


def _tc_words(command: str, dev: str) -> list[str] | None:
    """One of compose's shaping shell lines as argv for `tc -n NS`, or None for the tolerant `del` line."""
    if " 2>/dev/null || true" in command:
        return None
    words = command.replace("$dev", dev).split()
    assert words[0] == "tc"
    return words[1:]


def plan_commands(name: str, topology: Topology, shape: bool = True) -> list[list[str]]:
    """Every command that builds the netem testbed after its namespaces exist, in order (argv lists).
    `shape=False` leaves out the tc lines, to check the plumbing (veths, addresses, forwarding, routes) on a
    kernel without netem."""
    cmds: list[list[str]] = []
    for host in topology.hosts:
        ns = namespace_name(name, host.name)
        cmds.append(["ip", "-n", ns, "link", "set", "lo", "up"])
        cmds.append(["ip", "-n", ns, "addr", "add", f"{host.address}/32", "dev", "lo"])
    for i, link in enumerate(topology.links):
        dev_a, dev_b = link_devices(i)
        ns_a, ns_b = namespace_name(name, link.a), namespace_name(name, link.b)
        cmds.append(["ip", "link", "add", dev_a, "netns", ns_a, "mtu", str(topology.mtu), "type", "veth",
                     "peer", "name", dev_b, "netns", ns_b, "mtu", str(topology.mtu)])
        for ns, dev, end in ((ns_a, dev_a, "a"), (ns_b, dev_b, "b")):
            cmds.append(["ip", "-n", ns, "addr", "add", f"{link_address(i, end)}/24", "dev", dev])
            cmds.append(["ip", "-n", ns, "link", "set", dev, "up"])
            if shape:
                for line in shaping_commands("$dev", link, topology.mtu):
                    words = _tc_words(line, dev)
                    if words is not None:
                        cmds.append(["tc", "-n", ns, *words])
    index_of = {link.key: i for i, link in enumerate(topology.links)}
    for host in topology.hosts:
        ns = namespace_name(name, host.name)
        for other in topology.hosts:
            if other is host:
                continue
            nxt = topology.next_hop(host.name, other.name)
            i = index_of[frozenset((host.name, nxt))]
            via = link_address(i, "a" if topology.links[i].a == nxt else "b")
            cmds.append(["ip", "-n", ns, "route", "replace", f"{other.address}/32", "via", via,
                         "src", host.address])
    return cmds


def reshape_commands(name: str, topology: Topology, link: Link) -> list[list[str]]:
    """tc commands changing a running link's shaping (both ends) to `link`'s, for `set_link`. In place
    (`tc qdisc change`, queued packets kept) unless a rate limit appears or goes, which changes the qdiscs."""
    i = next(k for k, old in enumerate(topology.links) if old.key == link.key)
    in_place = (topology.links[i].rate_mbit is None) == (link.rate_mbit is None)
    cmds: list[list[str]] = []
    for host, dev in zip((link.a, link.b), link_devices(i), strict=True):
        ns = namespace_name(name, host)
        if not in_place:
            cmds.append(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"])
        for line in shaping_commands("$dev", link, topology.mtu):
            words = _tc_words(line, dev)
            if words is not None:
                cmds.append(["tc", "-n", ns, "qdisc", "change", *words[2:]] if in_place else ["tc", "-n", ns, *words])
    return cmds


def run_commands(cmds: list[list[str]]) -> None:
    for argv in cmds:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise TestbedError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
