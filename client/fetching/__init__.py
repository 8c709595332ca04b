"""Fetching: ``get_file`` (a manifest's blocks from depots), ``fetch_mirrors`` (one file from several HTTP
replicas, MDTP) and ``get_directory`` (a tree), all writing through one part file (``partfile``: locked,
preallocated, positional writes, fsync, rename) and its resume state.

It takes typed arguments and returns results; it must not import the commands, ``sending``, argparse or rich, nor
print. It may import the wire, the engines and the formats.
"""
