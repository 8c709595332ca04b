"""``lnet-get``'s entry point: the hosts of the URLs on the command line are dialled first (``wire.predial``: the
standard library and nothing else), then ``commands.get`` is loaded and run with those connections.

Loading the command and parsing its arguments takes a few hundredths of a second; a dial started before them
has its handshake done, or on the way, by the time the first ranges are known. A URL dialled that the command
then does not use costs one connection, closed at once. At the end the objects left are frozen out of the
garbage collector: the interpreter's last collection over everything trio and the download loaded would take
another 0.02 s, for memory the exit frees anyway.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    from lnet.client.wire.predial import Predial, command_line_urls

    argv = sys.argv[1:]
    predial = Predial.dial(command_line_urls(argv))
    from lnet.client.commands.get import main as get_main

    code = get_main(argv, predial=predial)
    import gc

    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
