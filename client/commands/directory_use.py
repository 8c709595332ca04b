"""How lnet-send uses the depot directory: the overlay found at the start (``discover``), its notes shown one line
each, and the follower that keeps the transfer's depots in step with the directory while it runs
(``lnet.client.sending.membership``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lnet.client.commands.discover import DirectoryUnavailable, Discovered, discover, etcd_settings
from lnet.client.commands.outcome import Failed
from lnet.client.commands.output import CommandOutput
from lnet.client.exits import ExitCode
from lnet.client.formats.overlay import OverlayError
from lnet.units import parse_duration

if TYPE_CHECKING:
    import httpx

    from lnet.client.commands.send_args import SendArgs
    from lnet.client.sending.relay import Relay
    from lnet.directory.entries import DepotRecord
    from lnet.scheduler import EdgeMemory

__all__ = ["discovered", "membership_follower", "share_memory", "start_from_overlay_memory"]


async def discovered(args: SendArgs, out: CommandOutput, state_dir: Path) -> Discovered | Failed | None:
    """The overlay of the depots file and the directory (None: no directory is named; the depots file alone is
    read as before)."""
    import os

    if args.directory is None and not os.environ.get("LNET_DIRECTORY"):
        try:
            from lnet.client.formats.overlay import Overlay

            if Overlay.load(args.depots).directory is None:
                return None
        except OverlayError:
            return None  # the usual checks say what is wrong with it
    try:
        timeout_s = min(5.0, parse_duration(args.timeout))
        found = await discover(args.depots, args.directory, state_dir=state_dir, timeout_s=timeout_s)
    except (OverlayError, ValueError) as exc:
        return Failed(ExitCode.USAGE, str(exc))
    except DirectoryUnavailable as exc:
        return Failed(ExitCode.UNREACHABLE, str(exc))
    for line in found.notes:
        out.note(line)
    return found


def membership_follower(
    found: Discovered, transport: httpx.AsyncBaseTransport | None, timeout_s: float, note: Callable[[str], None]
) -> Callable[[Relay], Awaitable[None]] | None:
    """The task that follows the directory during a transfer (None when there is nothing to follow: the list came
    from the cache)."""
    if found.ref is None or found.revision is None:
        return None
    ref, revision = found.ref, found.revision
    settings = etcd_settings(ref, min(timeout_s, 5.0))

    async def follow(relay: Relay) -> None:
        from lnet.client.sending.membership import follow_directory
        from lnet.client.wire.depot_client import DepotClient

        def joined(record: DepotRecord) -> bool:
            if record.token_required_for:
                note(f"depot {record.name} joined, but requires its operator token for "
                     f"{', '.join(record.token_required_for)}: left out")
                return False
            if record.max_allocation < relay.config.block_size:
                note(f"depot {record.name} joined, but lends at most {record.max_allocation} bytes at once, less "
                     f"than a block: left out")
                return False
            if record.name in relay.clients and record.name not in relay.dead:
                return False
            client = relay.clients.get(record.name)
            if client is None:
                client = DepotClient(record.url, timeout=timeout_s, transport=transport)
                opened.append(client)
            relay.depot_joined(record.name, client)
            return True

        opened: list[DepotClient] = []
        try:
            await follow_directory(relay, settings, ref.prefix, revision, known=set(found.overlay.depots),
                                   joined=joined, note=note)
        finally:
            import trio

            with trio.CancelScope(shield=True):
                for client in opened:
                    await client.aclose()

    return follow


async def start_from_overlay_memory(found: Discovered | None, memory: EdgeMemory, note: Callable[[str], None]) -> None:
    """A client that remembers nothing starts from the overlay's memory (when a directory is used)."""
    if found is None or found.ref is None or found.revision is None or len(memory) > 0:
        return
    from lnet.client.commands.shared_memory import adopt_overlay_memory

    taken, notes = await adopt_overlay_memory(etcd_settings(found.ref, 5.0), found.ref, memory)
    for line in notes:
        note(line)
    if taken:
        note(f"no memory of its own: starting from the overlay's ({taken} edges measured by other clients)")


async def share_memory(
    found: Discovered | None, here: str, memory: EdgeMemory, state_dir: Path, note: Callable[[str], None]
) -> None:
    """Publish what this client knows of the edges for the overlay's other clients (when a directory is used)."""
    if found is None or found.ref is None or found.revision is None:
        return
    from lnet.client.commands.shared_memory import publish_memory

    problem = await publish_memory(etcd_settings(found.ref, 5.0), found.ref, here, memory, state_dir)
    if problem is not None:
        note(problem)
