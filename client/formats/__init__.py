"""The documents lnet writes and reads: the file manifest, the tree manifest (and rebuilding a tree from its
stream), the transfer report, the depots file (``overlay``), and the shared rules for reading them safely.

Formats parse and validate what may come from anyone and write what they hold (0600 where it holds secrets). They
must not import the wire, sending, fetching or the commands, nor do network I/O; rich and matplotlib are loaded
only by the report's table and plot functions, when called.
"""
