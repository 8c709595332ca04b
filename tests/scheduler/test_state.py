"""The decision loop's state value and its transitions (``lnet.scheduler._state``)."""

from __future__ import annotations

from lnet.scheduler._state import Ceilings, Exploration, Hope, LoopState, Memory, News, Scouts


def test_a_loop_that_asks_for_probes_starts_unheard_and_one_that_does_not_moves() -> None:
    assert LoopState.first(probes=True).exploration is Exploration.PROBES_UNHEARD
    assert LoopState.first(probes=True).probing
    assert LoopState.first(probes=False).exploration is Exploration.MOVES
    assert not LoopState.first(probes=False).probing


def test_a_probe_heard_from_confirms_probing_and_moves_stay_moves() -> None:
    state = LoopState.first(probes=True)
    assert state.heard().exploration is Exploration.PROBES
    assert state.heard().heard().exploration is Exploration.PROBES
    moving = state.unheard()
    assert moving.exploration is Exploration.MOVES
    assert moving.heard().exploration is Exploration.MOVES  # final


def test_a_hope_that_did_not_hold_spends_the_ceilings_and_one_that_held_does_not() -> None:
    state = LoopState().hope_on(("s", "a", "d"), ("s", "d"))
    assert state.hope == Hope(("s", "a", "d"), ("s", "d"))
    assert state.hoping == ("s", "a", "d")
    held = state.hope_over(spent=False)
    assert held.hope is None
    assert held.ceilings is Ceilings.OPEN
    spent = state.hope_over(spent=True)
    assert spent.ceilings is Ceilings.SPENT
    assert spent.hope_on(("s", "b", "d"), None).hope_over(spent=False).ceilings is Ceilings.SPENT  # final


def test_news_waits_for_the_tick_that_takes_it() -> None:
    state = LoopState().with_news(News.HOP_FAILED).with_news(News.PROBE_ENDED)
    assert state.news == {News.HOP_FAILED, News.PROBE_ENDED}
    assert state.without(News.HOP_FAILED).news == {News.PROBE_ENDED}
    assert state.without(News.HOP_FAILED).without(News.HOP_FAILED).news == {News.PROBE_ENDED}


def test_scouts_are_due_until_done_and_the_memory_once_discredited_stays_so() -> None:
    state = LoopState().scouts_due()
    assert state.scouts is Scouts.DUE
    assert state.scouts_done().scouts is Scouts.NONE
    assert LoopState().discredit().memory is Memory.DISCREDITED
