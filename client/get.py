"""``python -m lnet.client.get``: runs the command as ``lnet-get`` does (``lnet.client.commands.get_entry``; kept so
that scripts and the testbed that run the module by this name go on working). Nothing else belongs here."""

from __future__ import annotations

import sys

from lnet.client.commands.get_entry import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
