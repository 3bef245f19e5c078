"""The commit point's encoding in the offset node: round trips, clipping, and hand-edited nodes."""

from __future__ import annotations

import logging

import pytest

from jetkafka.ordering import CommitPoint
from jetkafka.ordering._commit_point import decode_commit, encode_offset, finished_of, runs_of


@pytest.mark.parametrize(
    ("offset", "finished"),
    [
        (0, ()),
        (1200, ((1202, 1205), (1209, 1210))),
        (7, ((8, 9),)),  # right above the offset: gap 1
        (5, tuple((o, o + 1) for o in range(6, 400, 2))),  # many one-offset runs
        (10**12, ((10**12 + 3, 10**12 + 50_003),)),
    ],
)
def test_encode_then_decode_gives_the_same_point(offset: int, finished: tuple[tuple[int, int], ...]) -> None:
    point = CommitPoint(offset, finished)
    decoded = decode_commit(encode_offset(point))
    assert decoded == offset
    assert finished_of(decoded) == finished
    if finished:
        assert isinstance(decoded, CommitPoint) and decoded.same_as(point)
    else:
        assert type(decoded) is int  # no map: a bare offset, as a partition-mode owner reads it


def test_the_encoding_is_the_documented_one() -> None:
    assert encode_offset(CommitPoint(1200, ((1202, 1205), (1209, 1210)))) == b"1200\n2+3,4+1"
    assert encode_offset(1200) == b"1200"
    assert encode_offset(CommitPoint(1200)) == b"1200"


def test_a_lazily_built_map_is_read_once_at_first_use() -> None:
    reads = []

    def read() -> tuple[tuple[int, int], ...]:
        reads.append(1)
        return ((3, 5), (8, 9))

    point = CommitPoint(2, read)
    assert reads == []
    assert encode_offset(point) == b"2\n1+2,3+1"
    assert point.finished_count == 3 and point.finished_offsets() == {3, 4, 8}
    assert reads == [1]


def test_runs_at_or_below_the_offset_are_clipped() -> None:
    # The offset itself is unfinished by definition; runs at or below it mean nothing.
    point = CommitPoint(10, ((2, 5), (8, 12), (10, 11), (13, 14)))
    assert point.finished == ((11, 12), (13, 14))
    assert CommitPoint(10, ((2, 11),)).finished == ()
    assert encode_offset(CommitPoint(10, ((2, 11),))) == b"10"


def test_arithmetic_gives_plain_offsets_and_equality_compares_offsets_only() -> None:
    point = CommitPoint(10, ((12, 13),))
    assert point + 1 == 11 and type(point + 1) is int
    assert point == 10 and point == CommitPoint(10)
    assert not point.same_as(CommitPoint(10)) and point.same_as(CommitPoint(10, ((12, 13),)))


def test_runs_of_folds_unsorted_offsets_with_repeats() -> None:
    assert runs_of([5, 3, 4, 9, 4, 11, 10]) == ((3, 6), (9, 12))
    assert runs_of([]) == ()


@pytest.mark.parametrize(
    "second_line",
    ["x", "2+3,oops", "2-3", "0+1", "2+0", "2+3,4", "-1+2", "2+3,,1+1"],
)
def test_a_malformed_second_line_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture, second_line: str) -> None:
    caplog.set_level(logging.WARNING, logger="jetkafka.ordering")
    decoded = decode_commit(f"1200\n{second_line}".encode(), "/consumers/g/offsets/t/3")
    assert decoded == 1200 and type(decoded) is int  # the bare offset: those records are read again
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert "/consumers/g/offsets/t/3" in message and "1200" in message and "processed again" in message


@pytest.mark.parametrize("data", [b"", b"abc", b"\n2+3", b"  "])
def test_a_node_without_an_offset_is_no_commit(data: bytes) -> None:
    assert decode_commit(data) is None


def test_whitespace_around_the_lines_is_tolerated() -> None:
    decoded = decode_commit(b" 1200 \n 2+3 \n")
    assert decoded == 1200 and finished_of(decoded) == ((1202, 1205),)
    assert type(decode_commit(b"1200\n\n")) is int
