"""A hop's depth above Wu et al.'s rule (``lnet.client.engines.depth``): a hop that has carried enough at its depth
tries twice the depth, keeps it as a floor if it carries ``DEPTH_GAIN`` times more and tries the next level at
once, and otherwise waits ``COOLDOWN_FLUSHES`` before trying again; a starved hop tries nothing."""

from __future__ import annotations

from lnet.client.engines.depth import COOLDOWN_FLUSHES, DEPTH_GAIN, DepthClimb, Flushed

MiB = 1024 * 1024


def flush(rate_mib_s: float, copies: int, *, starved: bool = False, began: int | None = None) -> Flushed:
    """``copies`` of 1 MiB in a flush, at ``rate_mib_s`` over the time the hop was busy."""
    return Flushed(copies * MiB, copies / rate_mib_s, copies, copies if began is None else began, starved)


def test_a_level_is_judged_on_two_copies_a_stream_that_began_at_it() -> None:
    climb = DepthClimb(2, 16)
    assert climb.depth(2, flush(4.0, 2)) == 2  # the first copies: let by
    assert climb.depth(2, flush(4.0, 3)) == 2  # one, two, three copies counted
    assert climb.trial is None
    assert climb.depth(2, flush(4.0, 1)) == 4  # four: two a stream, and a trial of twice the depth
    assert climb.trial == 4
    assert climb.below_bps == 4.0 * MiB


def test_a_deeper_level_that_carries_more_is_kept_as_a_floor() -> None:
    climb = DepthClimb(2, 16)
    for copies in (2, 4):
        climb.depth(2, flush(4.0, copies))
    assert climb.trial == 4
    climb.depth(2, flush(8.0, 4, began=2))  # copies in flight from the level before end: let by until four
    climb.depth(2, flush(8.0, 2, began=2))
    assert climb.depth(2, flush(4.0 * DEPTH_GAIN, 8)) == 8  # kept as a floor, and the next level tried at once
    assert climb.floor == 4
    assert climb.trial == 8
    assert climb.below_bps == 4.0 * DEPTH_GAIN * MiB  # against what the level just kept carried


def test_a_hop_that_gains_at_every_level_climbs_one_trial_a_level() -> None:
    # a lossy hop: each copy held to its loss limit, so twice the copies carry twice as much, up to the ceiling;
    # each level is let by (its depth in copies) and judged (twice its depth), nothing counted twice
    climb = DepthClimb(2, 16)
    climb.depth(2, flush(1.0, 2))
    climb.depth(2, flush(1.0, 4))
    flushes = 0
    for level in (4, 8, 16):
        assert climb.trial == level
        climb.depth(2, flush(level / 2, level))  # the copies that began at the level before: let by
        flushes += 1
        climb.depth(2, flush(float(level), 2 * level))
        flushes += 1
    assert climb.floor == 16
    assert climb.trial is None
    assert flushes == 6
    assert climb.tried == 3


def test_a_climb_stops_at_the_level_that_adds_nothing_and_keeps_the_one_below() -> None:
    climb = DepthClimb(2, 16)
    climb.depth(2, flush(1.0, 2))
    climb.depth(2, flush(1.0, 4))
    climb.depth(2, flush(2.0, 4))
    assert climb.depth(2, flush(2.0, 8)) == 8  # 4 kept (twice the rate), 8 tried
    climb.depth(2, flush(2.0, 8))
    assert climb.depth(2, flush(2.1, 16)) == 4  # 8 adds 5%: the link is full
    assert (climb.floor, climb.trial, climb.cooldown) == (4, None, COOLDOWN_FLUSHES)


def test_a_deeper_level_that_carries_no_more_is_given_up_for_a_while() -> None:
    climb = DepthClimb(2, 16)
    for copies in (2, 4):
        climb.depth(2, flush(4.0, copies))
    climb.depth(2, flush(4.0, 4))
    assert climb.depth(2, flush(4.0, 8)) == 2  # the same rate at twice the copies: a full link
    assert climb.floor == 2
    assert climb.trial is None
    assert climb.cooldown == COOLDOWN_FLUSHES
    for _ in range(COOLDOWN_FLUSHES - 1):
        assert climb.depth(2, flush(4.0, 4)) == 2
    assert climb.depth(2, flush(4.0, 4)) == 4  # tried again


def test_a_starved_hop_tries_nothing_and_counts_afresh() -> None:
    climb = DepthClimb(2, 16)
    for _ in range(10):
        assert climb.depth(2, flush(1.0, 4, starved=True)) == 2
    assert climb.tried == 0
    assert climb.copies == 0


def test_the_rule_above_the_floor_is_the_depth_and_the_trial_is_bounded_by_the_ceiling() -> None:
    climb = DepthClimb(2, 6)
    assert climb.depth(9, None) == 6
    for copies in (6, 12):
        climb.depth(5, flush(4.0, copies))
    assert climb.trial == 6  # twice 5, within the ceiling
