"""The lnet client: ``lnet-send``, ``lnet-get``, ``lnet`` and the libraries under them, in sub-packages by role.

Dependencies run one way, top to bottom; a package imports only those below it:

- ``commands``: every command's ``main`` (argument parsing, progress, output, exit codes). The only place that
  prints or reads ``argv``.
- ``sending`` (the relay, the send journal, ``send``) and ``fetching`` (downloads from depots and replicas, the
  part file): the I/O shells that carry out what the engines decide.
- ``wire`` (the depot client, the range connection) and ``engines`` (pure planners: chunks, small files,
  striping); ``formats`` (manifests, reports, the depots file: documents on disk).

``lnet.client.get``, ``lnet.client.send`` and ``lnet.client.cli`` only run their command for ``python -m``.
Nothing in the client imports ``lnet.depot`` (nor starlette or hypercorn; ``lnet demo`` runs depots as programs):
the protocol's vocabulary and the HTTP patches come from ``lnet.protocol``, sizes, durations and the checks of
numbers from ``lnet.units`` (``tests/test_imports.py`` holds the client to this).
"""
