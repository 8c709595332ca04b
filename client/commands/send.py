"""``lnet-send FILE --to DEPOT`` (or ``DIR``, or ``--source URL ...``): the command line.

Parses the arguments once into ``SendArgs`` (``commands.send_args``) and hands them to ``commands.send_transfer``,
which runs the transfer; only argparse and the exit codes are loaded before that, so that ``--help`` and usage
errors answer at once.
``main(argv, *, io=...)`` and ``run`` (the same in a running trio loop) take the command's ``ClientIO``: how it
reaches depots and replicas.
"""

from __future__ import annotations

import sys

from lnet.client.commands.clientio import ClientIO
from lnet.client.commands.send_args import SendArgs

__all__ = ["main", "run"]


def main(argv: list[str] | None = None, *, io: ClientIO | None = None) -> int:
    """``lnet-send``: its exit code. ``io``: how it reaches depots and replicas (None: the network)."""
    argv = sys.argv[1:] if argv is None else argv
    args = SendArgs.parse(argv)
    from lnet.client.commands.send_transfer import main_parsed

    return main_parsed(args, argv, io or ClientIO())


async def run(argv: list[str], *, io: ClientIO | None = None) -> int:
    """``main`` in a running trio loop (the caller's: tests run a whole command on an emulated network)."""
    args = SendArgs.parse(argv)
    from lnet.client.commands.send_transfer import transfer

    return await transfer(args, argv, io or ClientIO())


if __name__ == "__main__":
    sys.exit(main())
