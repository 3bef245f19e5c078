"""Offset ranges still to recover: an ordered list of disjoint half-open ranges.

A range is ``(start, end)`` with ``start < end``: ``start`` is the first offset to recover and
``end`` the first offset *not* to recover, so ``(0, 3)`` means offsets 0, 1 and 2 and holds
``end - start`` events. Every function here takes and returns *normal* lists: sorted by
``start``, no empty ranges, and no two ranges that overlap or touch (``(0, 3)`` and ``(3, 5)``
are one range ``(0, 5)``).

Guarantee: the functions are pure and total on normal input; :func:`normalize` makes any list of
ranges normal. :func:`parse` refuses malformed input (from a hand-edited ZooKeeper node) with a
``ValueError`` saying what is wrong, rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Range = tuple[int, int]
Ranges = tuple[Range, ...]


def normalize(ranges: Iterable[Range]) -> Ranges:
    """Sort, drop empty ranges, and merge ranges that overlap or are adjacent."""
    merged: list[list[int]] = []
    for start, end in sorted((int(s), int(e)) for s, e in ranges):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((s, e) for s, e in merged)


def add(ranges: Sequence[Range], new: Range) -> Ranges:
    """``ranges`` with ``new`` added (merged with any range it overlaps or touches)."""
    return normalize((*ranges, new))


def subtract(ranges: Sequence[Range], cut: Range) -> Ranges:
    """``ranges`` without the offsets of ``cut``; a cut inside a range splits it in two."""
    cut_start, cut_end = cut
    if cut_end <= cut_start:
        return tuple(ranges)
    out: list[Range] = []
    for start, end in ranges:
        if end <= cut_start or start >= cut_end:
            out.append((start, end))
            continue
        if start < cut_start:
            out.append((start, cut_start))
        if end > cut_end:
            out.append((cut_end, end))
    return tuple(out)


def count(ranges: Iterable[Range]) -> int:
    """Number of offsets (events, when none are missing from the log) in ``ranges``."""
    return sum(end - start for start, end in ranges)


def trim_below(ranges: Sequence[Range], low: int) -> tuple[Ranges, int]:
    """``ranges`` without every offset below ``low``, and how many offsets that removed."""
    kept = subtract(ranges, (0, low))
    return kept, count(ranges) - count(kept)


def trim_from(ranges: Sequence[Range], high: int) -> tuple[Ranges, int]:
    """``ranges`` without every offset at or above ``high``, and how many offsets that removed."""
    if not ranges:
        return (), 0
    kept = subtract(ranges, (high, max(high, ranges[-1][1])))
    return kept, count(ranges) - count(kept)


def cap(gap: Range, max_records: int | None) -> tuple[Range, int]:
    """Keep at most ``max_records`` of ``gap``, its newest part; returns it and how many were dropped."""
    start, end = gap
    if max_records is None or end - start <= max_records:
        return gap, 0
    return (end - max_records, end), end - max_records - start


def parse(data: Any) -> Ranges:
    """Ranges from JSON data ``[[start, end], ...]``; normal form is checked, not repaired."""
    if not isinstance(data, list):
        raise ValueError(f"ranges must be a list of [start, end] pairs, got {type(data).__name__}")
    out: list[Range] = []
    for item in data:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        ):
            raise ValueError(f"range {item!r} is not a pair of integer offsets [start, end]")
        start, end = item
        if start < 0 or end <= start:
            raise ValueError(f"range [{start}, {end}) is empty or negative")
        out.append((start, end))
    if tuple(out) != normalize(out):
        raise ValueError(f"ranges {data!r} are not sorted, disjoint and non-adjacent")
    return tuple(out)


def describe(ranges: Sequence[Range], limit: int = 4) -> str:
    """``[0, 100) [250, 300)`` for logs; long lists are shortened with a count."""
    shown = " ".join(f"[{s}, {e})" for s, e in ranges[:limit])
    if len(ranges) > limit:
        shown += f" and {len(ranges) - limit} more"
    return shown or "none"
