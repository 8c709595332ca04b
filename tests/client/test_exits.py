"""Ctrl-C in lnet's client programs: raised at the main task's next wait, and recognised however it comes."""

from __future__ import annotations

import signal

import pytest
import trio
import trio.lowlevel

from lnet.client.exits import ExitCode, is_interrupt, run_interruptible


def test_ctrl_c_is_raised_at_the_next_wait_not_in_the_middle_of_work() -> None:
    reached: list[str] = []

    async def main() -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C comes in the middle of some bookkeeping
        reached.append("the bookkeeping went on")
        await trio.lowlevel.checkpoint()
        reached.append("past the wait")

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(main)
    assert reached == ["the bookkeeping went on"]


def test_ctrl_c_while_children_wait_cancels_them_and_their_cleanup_runs() -> None:
    cleaned: list[int] = []

    async def child(i: int, waiting: trio.Event) -> None:
        try:
            waiting.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
                cleaned.append(i)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(3):
                waiting = trio.Event()
                nursery.start_soon(child, i, waiting)
                await waiting.wait()
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(BaseExceptionGroup) as caught:
        run_interruptible(main)
    assert is_interrupt(caught.value)
    assert sorted(cleaned) == [0, 1, 2]


def test_run_interruptible_returns_what_main_returns() -> None:
    async def main(x: int) -> int:
        await trio.lowlevel.checkpoint()
        return x + 1

    assert run_interruptible(main, 41) == 42


def test_lnet_answers_ctrl_c_with_a_word_and_130_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lnet.client.commands import cli

    async def asking() -> None:
        await trio.sleep_forever()

    def interrupted(*args: object, **kwargs: object) -> object:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(asking)
                await trio.lowlevel.checkpoint()
                signal.raise_signal(signal.SIGINT)
        return run_interruptible(main)

    monkeypatch.setattr("lnet.client.commands.depots_directory.run", interrupted)
    assert cli.main(["depots"]) == ExitCode.INTERRUPTED
    assert capsys.readouterr().err == "lnet: interrupted\n"
