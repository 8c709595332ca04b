"""lnet's testbed: long-distance networks emulated on one machine, and docker-compose testbeds with shaped links.

`Topology` reads the topology file; `Testbed` brings it up as network namespaces joined by the userspace link
emulator; `compose` writes a docker-compose testbed (tc netem) from the same file. See docs/testbed.md.
"""

from .netns import TestbedError, TestbedStateError
from .testbed import Testbed
from .topology import Host, Link, Topology, TopologyError

__all__ = ["Host", "Link", "Testbed", "TestbedError", "TestbedStateError", "Topology", "TopologyError"]
