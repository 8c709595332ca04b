"""The commands: ``lnet-get``, ``lnet-send`` and ``lnet`` (report, demo, depots), their exit codes, progress
bars and output. Each ``main(argv) -> int`` parses its arguments, calls ``sending`` or ``fetching`` with typed
options, and turns the outcome into output and an exit code.

A command module imports at its top only what parsing needs (argparse, ``lnet.units``, the exit codes), so that
``--help`` and usage errors answer at once; trio, httpx, rich, the scheduler and the libraries are imported in
``main`` after parsing. Nothing below ``commands`` imports it.
"""
