"""Sending: ``send`` (one file, a tree's packed stream, or a file arriving from replicas) through the pipelined
``Relay`` and the scheduler, with the send journal (``journal``, ``resume``) that lets an interrupted run resume.

It takes typed arguments and returns results; it must not import the commands, argparse or rich, nor print. It
may import the wire, the engines, the formats, ``fetching`` (replicas feeding the relay) and ``lnet.scheduler``.
"""
