"""The commands: ``lnet-get``, ``lnet-send`` and ``lnet`` (report, demo, depots), their exit codes, progress
bars and output. Each command goes the same way:

1. ``output.parse_arguments`` (or the parser itself, for lnet-send) turns ``argv`` into the command's typed,
   frozen options (``get.GetArgs``, ``send_args.SendArgs``, ``cli.ReportArgs``, ``depots.DepotsArgs``, ...: fields
   named as the flags). Nothing after this step sees an ``argparse.Namespace``.
2. The command calls ``sending`` or ``fetching`` with typed options and its ``clientio.ClientIO`` (how it
   reaches the network: the seam the tests use), and gets an outcome (``outcome.Delivered``, ``Fetched``,
   ``TreeFetched``, ``ReplicasFetched``) or a ``outcome.Failed``.
3. ``outcome.finish`` turns the outcome into the follow-ups (manifest, edge memory, report), the summary or
   ``--json`` document, and the exit code: the one place that does.

``main(argv, *, io=None)`` runs its own trio loop; ``run(argv, *, io=...)`` (lnet-get, lnet-send) is the same
command for a caller already in one. A command module imports at its top only what parsing needs (argparse,
``lnet.units``, the exit codes), so that ``--help`` and usage errors answer at once; trio, httpx, rich, the
scheduler and the libraries are imported after parsing. Nothing below ``commands`` imports it.
"""
