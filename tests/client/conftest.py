"""Fixtures for client tests: the depot tests' in-process depots (``open_depot``, ``routes``) and the testbed
tests' root check (``requires_root``, ``bed_name``), shared as they are."""

from tests.depot.conftest import config_for, open_depot, routes
from tests.testbed.conftest import bed_name, requires_root

__all__ = ["bed_name", "config_for", "open_depot", "requires_root", "routes"]
