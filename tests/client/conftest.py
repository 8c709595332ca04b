"""Fixtures for client tests: the depot tests' in-process depots (``open_depot``, ``routes``), shared as they are."""

from tests.depot.conftest import config_for, open_depot, routes

__all__ = ["config_for", "open_depot", "routes"]
