"""The exit statuses of lnet's client programs (``lnet-send``, ``lnet-get``, ``lnet``), one meaning each.

A script can tell "try again later" (``UNREACHABLE``) from "the data is wrong" (``INTEGRITY``) from "you typed it
wrong" (``USAGE``) without reading messages. ``EXIT_CODES_HELP`` is the table every CLI puts in its ``--help``.
The libraries' errors carry these codes, so this module sits below every layer and imports nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any, TypeVar

__all__ = ["EXIT_CODES_HELP", "ExitCode", "Failure", "is_interrupt", "run_interruptible"]

R = TypeVar("R")


class ExitCode(IntEnum):
    OK = 0
    """Everything asked for was done and verified."""
    FAILED = 1
    """Something else went wrong (a block that expired or was freed, a full disk, ...); the message says what."""
    USAGE = 2
    """Bad arguments, or an input file (manifest, report, depots file) that is unreadable or invalid; or a depot
    that refuses what they ask for (a block or a duration over its limits, a wrong token)."""
    UNREACHABLE = 3
    """A depot that was needed could not be reached, or stalled past the timeout; or it has no room (a file the
    destination cannot hold, a depot full past ``--space-wait``), or the far end made no progress past its wait."""
    INTEGRITY = 4
    """Bytes did not match their hash: a block, or the whole file."""
    INTERRUPTED = 130
    """Stopped by Ctrl-C (128 + SIGINT, as shells report it); what was done so far is kept for a resume."""


EXIT_CODES_HELP = """\
exit status:
  0    done: everything is complete and verified
  1    failed for another reason (the message says why)
  2    usage: bad arguments, an unreadable or invalid input file, or a depot refusing what
       they ask for (over its max_duration or max_allocation, a wrong token)
  3    unreachable: a depot could not be reached or stalled past --timeout, or has no
       room for the file (past --space-wait), or the other end made no progress
  4    integrity: a block or the whole file does not match its hash
  130  interrupted (Ctrl-C); run the same command again to resume"""


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C: ``KeyboardInterrupt`` out of ``trio.run``, bare or in the group a nursery wraps it in."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


def run_interruptible(main: Callable[..., Awaitable[R]], *args: Any) -> R:
    """``trio.run(main, *args)`` with Ctrl-C raised only at the main task's checkpoints.

    By default trio raises ``KeyboardInterrupt`` wherever the program happens to be when SIGINT comes, which may
    be the middle of a library's cancel scope (httpcore's, say): trio's cancel-scope stack is then corrupted, and
    the program may hang instead of saying how to resume. At a checkpoint of the main task it arrives as any
    cancellation does: every task is cancelled, its cleanup runs, and the interrupt reaches the handlers that
    turn it into exit 130 (``is_interrupt``). A program that calls this makes its long loops checkpoint, as trio
    code does anyway."""
    import trio  # this module sits below every layer; only the programs that run a loop need trio here

    return trio.run(main, *args, restrict_keyboard_interrupt_to_checkpoints=True)


class Failure(Exception):
    """An error that says which exit status it means (``exit_code``): what the libraries raise for a command to
    report as it is."""

    exit_code: ExitCode = ExitCode.FAILED
