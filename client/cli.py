"""``python -m lnet.client.cli``: runs the command in ``lnet.client.commands.cli`` (kept so that scripts and the
testbed that run the module by this name go on working). Nothing else belongs here."""

from __future__ import annotations

import sys

from lnet.client.commands.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
