"""The small-file planner against Wu et al.'s algorithms, on fixed file sets worked out by hand (pure, no I/O)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnet.client.engines.smallfiles import (
    Batch,
    FileItem,
    Piece,
    PlannedBlock,
    PlannerLimits,
    divide,
    equal_transfer,
    inequal_transfer,
    optimal_pp,
    pack,
    pipeline_depth,
    plan,
    transmission_queue,
)

BDP = 1000


def files(*sizes: int, start: int = 0, priority: bool = False) -> list[FileItem]:
    return [FileItem(start + i, size, priority) for i, size in enumerate(sizes)]


def keys(items: tuple[FileItem, ...] | list[FileItem]) -> list[int]:
    return [f.key for f in items]


def test_divide_puts_each_size_in_the_seeds_bucket() -> None:
    sizes = [1, 250, 251, 500, 501, 750, 751, 1000, 1001, 5000]
    buckets = divide(files(*sizes), BDP)
    assert [keys(b) for b in buckets] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_an_empty_file_goes_to_the_first_bucket() -> None:
    assert keys(divide(files(0, 2000), BDP)[0]) == [0]


def test_priority_files_go_to_the_front_of_buckets_one_four_and_five() -> None:
    ordinary = files(100, 400, 600, 900, 3000)
    urgent = files(400, 600, 900, 3000, start=10, priority=True)
    buckets = divide(ordinary + urgent, BDP)
    # <= BDP/2 to the front of No. 1 (even 400, which would be No. 2), (BDP/2, BDP] to No. 4, above to No. 5
    assert [keys(b) for b in buckets] == [[10, 0], [1], [2], [11, 12, 3], [13, 4]]


def test_optimal_pp_is_three_bdp_over_the_mean_small_file() -> None:
    buckets = divide(files(100, 300, 500, 700, 2000, 3000), BDP)
    params = optimal_pp(buckets, BDP, max_pp=20)
    assert params.pp == math.ceil(3 * BDP / 400) - 1 == 7
    assert params.times == 4 / 8
    assert params.n_big == 2


def test_optimal_pp_stays_below_max_pp_and_ignores_empty_files() -> None:
    assert optimal_pp(divide(files(*[10] * 50), BDP), BDP, max_pp=20).pp == 19
    assert optimal_pp(divide(files(0, 0, 500), BDP), BDP, max_pp=20).pp == 5  # MF is 500, not 500 / 3
    assert optimal_pp(divide(files(5000), BDP), BDP, max_pp=20).pp == 1  # no small file: MF undefined


def test_equal_transfer_lets_big_files_consume_small_ones_then_pairs_left_and_right() -> None:
    # No. 1: six of 100 (keys 0-5); No. 2: two of 400 (6, 7); No. 4: six of 900 (8-13); No. 5: one big (14).
    items = files(*[100] * 6, 400, 400, *[900] * 6, 2000)
    buckets = divide(items, BDP)
    params = optimal_pp(buckets, BDP, 20)
    assert params.pp == math.ceil(3 * BDP / (6800 / 14)) - 1 == 6
    assert params.times == 2 > params.n_big == 1
    transfer, new_pp, batches = transmission_queue(buckets, params, 20)
    assert (transfer, new_pp) == ("equal", 6)
    assert batches == equal_transfer(buckets, 6, 20)
    # While a big file is left: pp from the left, one big. Then pp + 1 = 7 is odd and pp + 2 <= maxPP: four from
    # the left (No. 2, then on into No. 4) and four from the right (No. 4).
    assert [(keys(b.small), keys(b.big)) for b in batches] == [
        ([0, 1, 2, 3, 4, 5], [14]),
        ([6, 7, 8, 9, 10, 11, 12, 13], []),
    ]


def test_equal_transfer_with_an_even_batch_and_at_max_pp() -> None:
    buckets = divide(files(100, 100, 100, 900, 900, 900), BDP)
    assert [keys(b.small) for b in equal_transfer(buckets, 3, 20)] == [[0, 1, 3, 4], [2, 5]]
    # pp + 1 odd and pp + 2 over maxPP: (pp + 1) // 2 from the left, one more from the right
    assert [keys(b.small) for b in equal_transfer(buckets, 4, 5)] == [[0, 1, 3, 4, 5], [2]]


def test_inequal_transfer_pads_every_batch_with_big_files() -> None:
    # six of 100 (0-5), six of 900 (6-11), eight big (12-19): MF 500, pp 5, times 2 <= N 8, newPP 5 + 8 // 2
    items = files(*[100] * 6, *[900] * 6, *[2000] * 8)
    buckets = divide(items, BDP)
    params = optimal_pp(buckets, BDP, 20)
    assert (params.pp, params.times, params.n_big) == (5, 2, 8)
    transfer, new_pp, batches = transmission_queue(buckets, params, 20)
    assert (transfer, new_pp) == ("inequal", 9)
    assert [(keys(b.small), keys(b.big)) for b in batches] == [
        ([0, 1, 2, 6, 7, 8], [12, 13, 14, 15]),
        ([3, 4, 5, 9, 10, 11], [16, 17, 18, 19]),
    ]


def test_inequal_transfer_with_an_odd_batch_takes_the_extra_file_from_the_left() -> None:
    buckets = divide(files(100, 100, 100, 100, 900, 900, 2000, 2000), BDP)
    batches = inequal_transfer(buckets, 5, 4)
    assert [(keys(b.small), keys(b.big)) for b in batches] == [([0, 1, 2, 4, 5], [6]), ([3], [7])]


def test_new_pp_is_capped_at_max_pp() -> None:
    items = files(*[100] * 6, *[900] * 6, *[2000] * 100)
    buckets = divide(items, BDP)
    transfer, new_pp, batches = transmission_queue(buckets, optimal_pp(buckets, BDP, 20), 20)
    assert (transfer, new_pp) == ("inequal", 20)
    assert len(batches[0].big) == 20 - 5


def test_inequal_transfer_needs_a_big_file_per_batch() -> None:
    with pytest.raises(ValueError, match="newPP > pp"):
        inequal_transfer(divide(files(100), BDP), 3, 3)


def test_half_priority_files_all_leave_before_the_last_ordinary_one() -> None:
    """The seed's file set shape (small and big files in equal numbers), half of each priority, at random."""
    rng = random.Random(7)
    sizes = [rng.randint(0, 100) for _ in range(100)] + [rng.randint(1000, 2000) for _ in range(100)]
    urgent = set(rng.sample(range(200), 100))
    items = [FileItem(i, size, i in urgent) for i, size in enumerate(sizes)]
    result = plan(items, 625, PlannerLimits(block_size=4096))
    order = result.order
    assert sorted(order) == list(range(200))
    last_ordinary = max(order.index(i) for i in range(200) if i not in urgent)
    assert all(order.index(i) < last_ordinary for i in urgent)
    # and ahead of every ordinary file of their kind: small ones ahead of small ones, big ahead of big
    for kind in ("small", "big"):
        queue = [f.key for batch in result.batches for f in getattr(batch, kind)]
        count = sum(1 for key in queue if key in urgent)
        assert count > 0
        assert set(queue[:count]) <= urgent


def test_the_seeds_file_set_at_50_and_100_ms() -> None:
    rng = random.Random(2)
    sizes = [rng.randint(0, 100_000) for _ in range(500)] + [rng.randint(10**6, 2 * 10**6) for _ in range(500)]
    items = files(*sizes)
    for bdp in (625_000, 1_250_000):
        result = plan(items, bdp)
        small = [s for s in sizes if s <= bdp]
        expected_pp = min(19, math.ceil(3 * bdp / (sum(small) / len([s for s in small if s]))) - 1)
        assert result.pp == expected_pp
        assert result.n_big == sum(1 for s in sizes if s > bdp)
        assert result.transfer == ("inequal" if len(small) / (result.pp + 1) <= result.n_big else "equal")
        assert sorted(result.order) == list(range(1000))
        assert all(block.length <= PlannerLimits().block_size for block in result.blocks)


def test_pack_concatenates_a_batchs_small_files_and_cuts_big_ones() -> None:
    small = files(3, 0, 5)
    big = files(10, start=3)
    blocks = pack([Batch(tuple(small), tuple(big))], block_size=4)
    assert blocks == [
        PlannedBlock((Piece(0, 0, 3), Piece(2, 0, 1))),
        PlannedBlock((Piece(2, 1, 4),)),
        PlannedBlock((Piece(3, 0, 4),)),
        PlannedBlock((Piece(3, 4, 4),)),
        PlannedBlock((Piece(3, 8, 2),)),
    ]


def test_pack_never_mixes_batches() -> None:
    blocks = pack([Batch(tuple(files(1)), ()), Batch(tuple(files(1, start=1)), ())], block_size=100)
    assert [b.length for b in blocks] == [1, 1]


def test_pipeline_depth_is_the_formula_over_blocks_within_bounds() -> None:
    blocks = [PlannedBlock((Piece(0, 0, 500),))] * 4
    assert pipeline_depth(1000, blocks, 2, 16) == math.ceil(3 * (1000 + 500) / 500) - 1 == 8
    assert pipeline_depth(1000, blocks, 2, 4) == 4
    assert pipeline_depth(100, blocks, 2, 16) == math.ceil(3 * 600 / 500) - 1 == 3
    assert pipeline_depth(1, blocks, 3, 16) == 3
    assert pipeline_depth(1000, [], 2, 16) == 2


def test_a_fixed_pp_is_the_seeds_default_through_the_same_queue() -> None:
    items = files(*[100] * 6, *[900] * 6, *[2000] * 8)
    result = plan(items, BDP, fixed_pp=2)
    assert (result.pp, result.depth, result.fixed) == (2, 2, True)
    assert all(len(batch.small) <= 3 for batch in result.batches)
    tuned = plan(items, BDP)
    assert not tuned.fixed
    assert tuned.pp == 5


@given(
    st.lists(st.tuples(st.integers(0, 5000), st.booleans()), max_size=60),
    st.integers(1, 3000),
    st.integers(1, 2048),
    st.integers(2, 25),
)
def test_every_plan_sends_every_byte_once(
    spec: list[tuple[int, bool]], bdp: int, block_size: int, max_pp: int
) -> None:
    items = [FileItem(i, size, urgent) for i, (size, urgent) in enumerate(spec)]
    result = plan(items, bdp, PlannerLimits(block_size=block_size, max_pp=max_pp))
    assert sorted(result.order) == list(range(len(items)))
    assert 1 <= result.pp < max_pp
    assert result.pp <= result.new_pp <= max(max_pp, result.pp + 1)
    covered: dict[int, int] = {}
    for block in result.blocks:
        assert 0 < block.length <= block_size
        for piece in block.pieces:
            assert piece.offset == covered.get(piece.key, 0)  # in order, no gap, no overlap
            covered[piece.key] = piece.offset + piece.length
    assert covered == {f.key: f.size for f in items if f.size > 0}
    assert result.depth >= 2
