"""What :mod:`tracemalloc` knows of the process's memory: the top allocations and the totals.

Guarantee: when tracemalloc traces (the process was started with ``PYTHONTRACEMALLOC=25`` or
``python -X tracemalloc=25``, or called :func:`tracemalloc.start`), :func:`memory_report` lists
the ``limit`` largest groups of live Python allocations, grouped by ``lineno`` (the line that
allocated), ``filename`` or ``traceback`` (the whole stack, as deep as tracemalloc keeps it),
each with its size and number of blocks, after the traced memory now and at its peak.
tracemalloc's own allocations and the import system's (module code) are left out. When it does not trace, the report says how to
start the process so that it does: tracemalloc sees only what was allocated after it started,
so turning it on in a running process would show little.

Cost: tracing itself makes every allocation slower (often by half or more) and takes memory
for each live block: it is for a process being looked into, not for every process. The report
takes a snapshot, which copies every trace while holding the GIL: proportional to the number of
live blocks, about a second per few million.

Failure modes: ``limit`` outside 1..1000 or an unknown ``group`` raise :class:`ValueError`.
Memory allocated outside Python's allocator (librdkafka's buffers, Arrow's) is not traced.
"""

from __future__ import annotations

import tracemalloc

__all__ = ["DEFAULT_LIMIT", "GROUPS", "MAX_LIMIT", "check_request", "memory_report"]

GROUPS = ("lineno", "filename", "traceback")
DEFAULT_LIMIT = 25
MAX_LIMIT = 1000

# Allocations of the import system (module code and dicts) are what any process holds; the
# Python documentation's own example leaves them out too.
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")

NOT_TRACING = """\
tracemalloc is not tracing in this process, so there are no allocations to show.

It sees only what is allocated after it starts, so start the process with it:

    PYTHONTRACEMALLOC=25 jetkafka run FILE
    python -X tracemalloc=25 -m jetkafka run FILE

(25 is how many frames of each allocation's stack are kept; 1 is cheaper and enough for
?group=lineno or filename). Tracing slows allocations down and takes memory of its own:
use it on the process being looked into, then restart it without.
"""


def check_request(limit: int, group: str) -> None:
    """Raise :class:`ValueError` naming the bound when a report of these settings would not be made."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    if group not in GROUPS:
        raise ValueError(f"group must be one of {', '.join(GROUPS)}, not {group!r}")


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if abs(size) < 1024:
            return f"{size:.1f} {unit}" if unit != "B" else f"{count} B"
        size /= 1024
    return f"{size:.1f} GiB"


def memory_report(limit: int = DEFAULT_LIMIT, group: str = "lineno") -> str:
    """The report as text (see the module's text)."""
    check_request(limit, group)
    if not tracemalloc.is_tracing():
        return NOT_TRACING
    current, peak = tracemalloc.get_traced_memory()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, pattern) for pattern in (tracemalloc.__file__, "<unknown>", *_IMPORT_MACHINERY)]
    )
    stats = snapshot.statistics(group)
    totals = (
        f"traced Python memory: {_size(current)} now, {_size(peak)} at peak "
        f"(tracemalloc's own: {_size(tracemalloc.get_tracemalloc_memory())}, "
        f"{tracemalloc.get_traceback_limit()} frames kept per allocation)"
    )
    lines = [
        totals,
        f"top {min(limit, len(stats))} of {len(stats)} by {group}:",
        "",
    ]
    for rank, stat in enumerate(stats[:limit], 1):
        where = stat.traceback[-1] if len(stat.traceback) else None  # the most recent frame
        place = f"{where.filename}:{where.lineno}" if where is not None else "?"
        if group == "filename" and where is not None:
            place = where.filename
        lines.append(f"#{rank}: {_size(stat.size)} in {stat.count} blocks at {place}")
        if group == "traceback":
            lines.extend(f"    {line}" for line in stat.traceback.format(most_recent_first=True))
    return "\n".join(lines) + "\n"
