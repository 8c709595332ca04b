"""``copy_allow``: the hosts a depot may push to (``POST /v1/copy`` targets and weather peers).

Pure: it looks at the host *as the copy's URL spells it* and never resolves a name. An entry is one of

- ``*``: any host (the default, and then the only entry);
- an IP address (``192.0.2.7``, ``2001:db8::7``) or a CIDR range (``10.0.0.0/8``, ``2001:db8::/32``): matches
  targets given as an IP address inside it (an IPv4-mapped IPv6 address, ``::ffff:10.1.2.3``, counts as its IPv4
  address);
- a host name (``atl.example.org``): matches a target spelt with that name (case and a trailing dot do not
  matter);
- ``*.example.org``: matches every name under ``example.org`` (not ``example.org`` itself).

Names and addresses never meet: a CIDR range does not admit a target spelt as a name, whatever it resolves to, and
a name does not admit its addresses. That is deliberate. Resolving a name to check it would send a DNS query for
every refused copy (a refused copy must cause no network traffic at all), and the address the check saw need not
be the one the copy then connects to (DNS rebinding: the name's owner answers the check with an allowed address
and the connection with another). Matching the spelling leaves one trust decision to the operator, which names
to list, and none to whoever controls a name's DNS. A host that looks numeric but is no address Python's
``ipaddress`` reads (``127.1``, ``2130706433``, ``0x7f.1``: the C resolver turns them into addresses) matches no
entry: such names are refused as entries too.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ANYWHERE", "CopyAllow", "IPNetwork", "normalise_host"]

ANYWHERE = "*"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# A host name of LDH labels (and '_', which some internal zones use), at most 253 characters; the last label must
# not be all digits, or the resolver may read the name as an address.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")


def normalise_host(host: str) -> str:
    """A host as entries and targets are compared: lower case, no brackets, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


@dataclass(frozen=True)
class CopyAllow:
    """A parsed ``copy_allow`` list; ``allows(host)`` is the whole decision."""

    anywhere: bool
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()  # ".example.org" for "*.example.org"
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> CopyAllow:
        """The list from its entries; ``ValueError`` naming the first bad one and what it should look like."""
        given = [entry.strip() for entry in entries]
        if ANYWHERE in given:
            if len(given) > 1:
                raise ValueError("'*' allows every host: give it alone, or list hosts and ranges")
            return cls(anywhere=True)
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for entry in given:
            kind, value = _entry(entry)
            if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
                networks.append(value)
            elif kind == "suffix":
                suffixes.append(value)
            else:
                names.add(value)
        return cls(False, frozenset(names), tuple(dict.fromkeys(suffixes)), tuple(dict.fromkeys(networks)))

    def allows(self, host: str) -> bool:
        """May the depot push to ``host`` (a URL's host: a name, an IPv4 address or a bracketed IPv6 one)?"""
        if self.anywhere:
            return True
        host = normalise_host(host)
        address = _address(host)
        if address is not None:
            candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                candidates.append(address.ipv4_mapped)
            return any(a in network for a in candidates for network in self.networks if a.version == network.version)
        if "%" in host or not _NAME.fullmatch(host) or _looks_numeric(host):
            return False
        return host in self.names or any(host.endswith(suffix) for suffix in self.suffixes)

    def entries(self) -> tuple[str, ...]:
        """The list in canonical spelling (what ``--print-config`` shows)."""
        if self.anywhere:
            return (ANYWHERE,)
        return (
            *sorted(self.names),
            *(f"*{suffix}" for suffix in self.suffixes),
            *(str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in self.networks),
        )


def _entry(entry: str) -> tuple[str, str | IPNetwork]:
    if not entry:
        raise ValueError("an empty entry (a stray comma?)")
    if "://" in entry or "/v1/" in entry:
        raise ValueError(f"hosts and address ranges, not URLs: {entry[:80]!r}")
    if "/" in entry:
        base, _, prefix = entry.partition("/")
        spelt = f"{normalise_host(base)}/{prefix}"
        try:
            return "network", ipaddress.ip_network(spelt)
        except ValueError as exc:
            if "host bits set" in str(exc):
                loose = ipaddress.ip_network(spelt, strict=False)
                raise ValueError(f"{entry!r} has host bits set: did you mean {loose}?") from None
            raise ValueError(f"{entry[:80]!r} is not a CIDR range like 10.0.0.0/8 ({exc})") from None
    host = normalise_host(entry)
    address = _address(host)
    if address is not None:
        return "network", ipaddress.ip_network(address)
    if host.startswith("*."):
        rest = host[2:]
        if _NAME.fullmatch(rest) and not _looks_numeric(rest):
            return "suffix", "." + rest
        raise ValueError(f"{entry[:80]!r}: a wildcard is '*.' and a domain name, like *.example.org")
    if host.count(":") == 1:
        raise ValueError(f"hosts, not ports: {entry[:80]!r} (every port of a listed host is allowed)")
    if not _NAME.fullmatch(host):
        raise ValueError(
            f"{entry[:80]!r} is neither a host name, an IP address, a CIDR range, '*.domain' nor '*'"
        )
    if _looks_numeric(host):
        raise ValueError(
            f"{entry[:80]!r} looks like an address but is not one Python reads; spell it as a dotted quad or a CIDR "
            "range"
        )
    return "name", host


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if "%" in host:  # an IPv6 zone: never a listed address
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _looks_numeric(host: str) -> bool:
    return _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is not None
