"""Range list math: half-open [start, end), ordered, merged when overlapping or adjacent."""

from __future__ import annotations

import random
from typing import Any

import pytest

from jetkafka.recovery import _ranges as rng


def offsets(ranges: rng.Ranges) -> set[int]:
    return {o for start, end in ranges for o in range(start, end)}


def test_half_open_first_in_last_out() -> None:
    assert offsets(((10, 13),)) == {10, 11, 12}
    assert rng.count(((10, 13),)) == 3
    assert rng.count(((0, 1), (5, 6))) == 2


def test_normalize_sorts_merges_overlapping_and_adjacent_and_drops_empty() -> None:
    assert rng.normalize([(20, 30), (0, 10), (10, 15), (5, 7), (40, 40), (50, 45)]) == ((0, 15), (20, 30))
    assert rng.normalize([(0, 10), (11, 12)]) == ((0, 10), (11, 12))  # a one-offset hole stays a hole
    assert rng.normalize([]) == ()


def test_add_merges_with_neighbours() -> None:
    ranges = ((0, 10), (20, 30))
    assert rng.add(ranges, (10, 20)) == ((0, 30),)  # touches both: one range
    assert rng.add(ranges, (25, 40)) == ((0, 10), (20, 40))
    assert rng.add(ranges, (12, 15)) == ((0, 10), (12, 15), (20, 30))
    assert rng.add((), (3, 4)) == ((3, 4),)


def test_subtract_front_middle_back_and_beyond() -> None:
    ranges = ((0, 10), (20, 30))
    assert rng.subtract(ranges, (0, 4)) == ((4, 10), (20, 30))
    assert rng.subtract(ranges, (4, 6)) == ((0, 4), (6, 10), (20, 30))
    assert rng.subtract(ranges, (8, 25)) == ((0, 8), (25, 30))
    assert rng.subtract(ranges, (0, 100)) == ()
    assert rng.subtract(ranges, (10, 20)) == ranges  # the hole between them
    assert rng.subtract(ranges, (5, 5)) == ranges


def test_subtract_is_idempotent_and_commutes() -> None:
    ranges = ((0, 100), (150, 200))
    once = rng.subtract(ranges, (40, 160))
    assert rng.subtract(once, (40, 160)) == once
    assert rng.subtract(rng.subtract(ranges, (0, 50)), (120, 170)) == rng.subtract(
        rng.subtract(ranges, (120, 170)), (0, 50)
    )


def test_trim_below_and_from_count_what_they_remove() -> None:
    ranges = ((0, 10), (20, 30))
    assert rng.trim_below(ranges, 5) == (((5, 10), (20, 30)), 5)
    assert rng.trim_below(ranges, 25) == (((25, 30),), 15)
    assert rng.trim_below(ranges, 0) == (ranges, 0)
    assert rng.trim_below(ranges, 100) == ((), 20)
    assert rng.trim_from(ranges, 25) == (((0, 10), (20, 25)), 5)
    assert rng.trim_from(ranges, 30) == (ranges, 0)
    assert rng.trim_from((), 3) == ((), 0)


def test_cap_keeps_the_newest_part() -> None:
    assert rng.cap((0, 1000), None) == ((0, 1000), 0)
    assert rng.cap((0, 1000), 1000) == ((0, 1000), 0)
    assert rng.cap((0, 1000), 300) == ((700, 1000), 700)
    assert rng.cap((500, 501), 1) == ((500, 501), 0)


def test_parse_accepts_normal_json_and_refuses_the_rest() -> None:
    assert rng.parse([[0, 10], [12, 20]]) == ((0, 10), (12, 20))
    assert rng.parse([]) == ()
    refusals: list[tuple[Any, str]] = [
        ([[0, 10], [10, 20]], "are not sorted, disjoint and non-adjacent"),  # adjacent
        ([[5, 10], [0, 2]], "are not sorted, disjoint and non-adjacent"),
        ([[3, 3]], "is empty or negative"),
        ([[-1, 2]], "is empty or negative"),
        ([[0, "9"]], "is not a pair of integer offsets"),
        ([[0, True]], "is not a pair of integer offsets"),
        ([[1]], "is not a pair of integer offsets"),
        ({"a": 1}, r"ranges must be a list of \[start, end\] pairs, got dict"),
    ]
    for bad, message in refusals:
        with pytest.raises(ValueError, match=message):
            rng.parse(bad)


def test_describe_is_short() -> None:
    assert rng.describe(()) == "none"
    assert rng.describe(((0, 10),)) == "[0, 10)"
    assert rng.describe(tuple((i * 10, i * 10 + 5) for i in range(6)), limit=2) == "[0, 5) [10, 15) and 4 more"


def test_random_operations_match_a_set_model() -> None:
    rand = random.Random(7)
    for _ in range(300):
        model: set[int] = set()
        ranges: rng.Ranges = ()
        for _ in range(12):
            start = rand.randrange(0, 200)
            end = start + rand.randrange(0, 40)
            if rand.random() < 0.6:
                ranges = rng.add(ranges, (start, end))
                model |= set(range(start, end))
            else:
                ranges = rng.subtract(ranges, (start, end))
                model -= set(range(start, end))
            assert offsets(ranges) == model
            assert rng.normalize(ranges) == ranges  # always normal
            assert rng.count(ranges) == len(model)
