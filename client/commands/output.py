"""What every command shows: one way to fail (a message on stderr, and the ``--json`` failure object), one
progress bar set-up, and the one parsing step (argv to a command's typed, frozen options; no
``argparse.Namespace`` leaves it). rich is imported here only when a console or a bar is made.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from lnet.client.exits import ExitCode

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["CommandOutput", "QuietProgress", "file_option_problem", "parse_arguments", "transfer_progress"]

Options = TypeVar("Options")


class CommandOutput:
    """A command's stderr console and its failure output.

    ``fail`` prints ``PROG: message`` on stderr and, with ``--json``, the failure object
    ``{"ok": false, "exit": CODE, "error": MESSAGE, "path": PATH}`` on stdout (when the command has one, as
    lnet-get does); it returns the exit code, so that ``return out.fail(...)`` ends a command."""

    def __init__(self, prog: str, *, json_failures: bool = False, path: Path | None = None) -> None:
        self.prog = prog
        self.json_failures = json_failures
        self.path = path
        self._err: Console | None = None

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._err

    def fail(self, code: ExitCode, message: str) -> int:
        self.err.print(f"{self.prog}: {message}", markup=False, soft_wrap=True)
        if self.json_failures:
            print(json.dumps({"ok": False, "exit": int(code), "error": message, "path": str(self.path)}))
        return int(code)

    def note(self, message: str) -> None:
        """A line on stderr that is not a failure (a warning the command goes on after)."""
        self.err.print(f"{self.prog}: {message}", markup=False, soft_wrap=True)

    def progress(self, no_progress: bool) -> Progress | QuietProgress:
        """The command's progress bar on stderr when ``show_progress`` says so, else a ``QuietProgress`` (and rich
        is never loaded for it)."""
        return transfer_progress(self.err) if self.show_progress(no_progress) else QuietProgress()

    def show_progress(self, no_progress: bool) -> bool:
        """Bars only on a terminal, and never with ``--no-progress``."""
        return not no_progress and self.err.is_terminal


def file_option_problem(option: str, path: Path | None) -> str | None:
    """What is wrong with ``path`` as the file an option (``--trace``) writes, or None: it must not be a
    directory, and its directory must exist (said before anything is sent or fetched)."""
    if path is None or not (path.is_dir() or not path.parent.is_dir()):
        return None
    where = "is a directory" if path.is_dir() else f"is in {path.parent}, which is not a directory"
    return f"{option} {path}: {where}; name a file in an existing directory"


class QuietProgress:
    """The progress bar when none is shown (``--no-progress``, or no terminal): the calls lnet's commands make,
    doing nothing, and rich (about a tenth of a second to import) never loaded for it."""

    def __enter__(self) -> QuietProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> TaskID:
        return cast("TaskID", 0)

    def advance(self, task: TaskID, advance: float = 1) -> None:
        return None

    def update(self, task: TaskID, **changes: Any) -> None:
        return None


def transfer_progress(
    console: Console, *labels: str, enabled: bool = True, transient: bool = False
) -> Progress | QuietProgress:
    """The one progress bar of lnet's commands: the ``labels`` (rich text columns over a task's description and
    fields), then bar, bytes, rate and time left. Not ``enabled``: a ``QuietProgress``."""
    if not enabled:
        return QuietProgress()
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = [TextColumn(label) for label in labels or ("{task.description}",)]
    return Progress(
        *columns, BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        console=console, disable=not enabled, transient=transient,
    )


def parse_arguments(
    parser: argparse.ArgumentParser, argv: list[str] | None, into: Callable[[argparse.Namespace], Options],
) -> Options | int:
    """The command's options (``into`` turns the parsed namespace into its typed, frozen options dataclass), or
    the exit code once argparse has answered ``--help`` or explained a usage error. The only place a
    ``Namespace`` exists."""
    try:
        return into(parser.parse_args(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(ExitCode.USAGE)
