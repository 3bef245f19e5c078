"""The soak checker's verdict: findings with their attribution, as a table and as JSON.

A :class:`Finding` is a count with a few examples; a :class:`Cause` says what a loss or a
duplicate is attributed to and whether the guarantees allow it; a :class:`Wait` is a
partition's longest wait (:mod:`tests.soak.isolation`). :class:`Report` holds every finding of
one run: its ``violations`` are the findings the guarantees do not allow, and its ``problems``
what made the run itself invalid. The offset mirror's verdict, in a run with
``commit_to_kafka``, is :class:`tests.soak.mirror.MirrorVerdict`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mirror.py builds on this module's Finding
    from tests.soak.mirror import MirrorVerdict

EXAMPLES = 8


@dataclass(frozen=True)
class Cause:
    fault: str  # the fault kind it is attributed to, or "unattributed"
    reason: str
    allowed: bool


@dataclass
class Finding:
    """A count of one kind of outcome, with a few examples."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, example: str) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


@dataclass(frozen=True)
class Wait:
    """A partition's longest wait: the record at ``offset`` was acknowledged at ``acked_at``
    and first delivered at ``delivered_at``."""

    partition: int
    seconds: float
    offset: int
    acked_at: float
    delivered_at: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "seconds": round(self.seconds, 3), "offset": self.offset,
            "acknowledged": round(self.acked_at, 3), "delivered": round(self.delivered_at, 3),
        }


@dataclass
class Report:
    mode: str
    events: dict[str, int]
    faults: dict[str, int]
    lost: dict[Cause, Finding]
    duplicated: dict[Cause, Finding]
    out_of_order: Finding
    foreign_commits: Finding
    offsets_back: Finding
    expired_sessions: list[str]
    notes: list[str]
    ownerless: Finding = field(default_factory=Finding)
    while_paused: Finding = field(default_factory=Finding)
    # Isolation: each partition's longest wait, the partitions that waited for one under a
    # condition, and batches of one partition in hand together in one process.
    waits: dict[int, Wait] = field(default_factory=dict)
    held_back: Finding = field(default_factory=Finding)
    overlapping: Finding = field(default_factory=Finding)
    # A neighbour subscription's change that moved the run's partitions or held its records back.
    disturbed: Finding = field(default_factory=Finding)
    # ordering key | none: a finished map claiming a record nobody processed, and one reaching
    # max_in_flight records above its commit point (tests.soak.commit_maps).
    map_claims: Finding = field(default_factory=Finding)
    over_window: Finding = field(default_factory=Finding)
    # What makes the run itself invalid (the producer died, a process never stopped): not a
    # violation of jetkafka's guarantees, but the run proves nothing until it is fixed.
    problems: list[str] = field(default_factory=list)
    # Kafka's copy of the group's offsets against ZooKeeper's (channel.commit_to_kafka): None
    # in a run without the mirror.
    mirror: MirrorVerdict | None = None

    @property
    def violations(self) -> int:
        return (
            sum(f.count for c, f in self.lost.items() if not c.allowed)
            + sum(f.count for c, f in self.duplicated.items() if not c.allowed)
            + self.out_of_order.count
            + self.foreign_commits.count
            + self.offsets_back.count
            + self.ownerless.count
            + self.while_paused.count
            + self.held_back.count
            + self.overlapping.count
            + self.disturbed.count
            + self.map_claims.count
            + self.over_window.count
            + (self.mirror.violations if self.mirror is not None else 0)
        )

    def as_dict(self) -> dict[str, Any]:
        def causes(table: dict[Cause, Finding]) -> list[dict[str, Any]]:
            return [
                {"fault": c.fault, "reason": c.reason, "allowed": c.allowed, "count": f.count, "examples": f.examples}
                for c, f in sorted(table.items(), key=lambda item: (item[0].allowed, -item[1].count))
            ]

        return {
            "mode": self.mode,
            "ok": self.violations == 0,
            "violations": self.violations,
            "events": self.events,
            "faults": self.faults,
            "lost": causes(self.lost),
            "duplicated": causes(self.duplicated),
            "out_of_order": vars(self.out_of_order),
            "foreign_commits": vars(self.foreign_commits),
            "offsets_went_back": vars(self.offsets_back),
            "ownerless": vars(self.ownerless),
            "processed_while_paused": vars(self.while_paused),
            "held_back": vars(self.held_back),
            "two_batches_at_once": vars(self.overlapping),
            "disturbed_by_a_neighbour": vars(self.disturbed),
            "map_claims_unprocessed": vars(self.map_claims),
            "window_over_max_in_flight": vars(self.over_window),
            "longest_waits": {str(p): w.as_dict() for p, w in sorted(self.waits.items())},
            "mirror": self.mirror.as_dict() if self.mirror is not None else None,
            "expired_sessions": self.expired_sessions,
            "notes": self.notes,
            "problems": self.problems,
        }


def format_table(report: Report) -> str:
    """The report as a fixed-width table, one line per finding."""
    rows = [("check", "attributed to", "reason", "allowed", "count")]
    for name, table in (("lost", report.lost), ("duplicated", report.duplicated)):
        for c, f in sorted(table.items(), key=lambda item: (item[0].allowed, -item[1].count)):
            rows.append((name, c.fault, c.reason, "yes" if c.allowed else "NO", str(f.count)))
        if not table:
            rows.append((name, "-", "-", "-", "0"))
    rows.append(("out of order", "-", "offsets not increasing within a hold", "NO", str(report.out_of_order.count)))
    rows.append(("foreign commits", "-", "offset written by a non-owner session", "NO", str(report.foreign_commits.count)))
    rows.append(("offsets went back", "-", "offset lowered outside a reset", "NO", str(report.offsets_back.count)))
    rows.append(("ownerless", "-", "a free partition not taken for 5+ s, ZooKeeper up", "NO", str(report.ownerless.count)))
    rows.append(("while paused", "-", "a batch started by a paused instance", "NO", str(report.while_paused.count)))
    rows.append(("held back", "-", "waited near as long as a partition held back on purpose", "NO", str(report.held_back.count)))
    rows.append(("two batches at once", "-", "one partition's batches in hand together in a process", "NO", str(report.overlapping.count)))
    rows.append(("disturbed", "-", "the group moved or held back by a neighbour's file", "NO", str(report.disturbed.count)))
    rows.append(("map claims", "-", "a finished map claims a record nobody processed", "NO", str(report.map_claims.count)))
    rows.append(("window", "-", "a finished map reaches past max_in_flight", "NO", str(report.over_window.count)))
    if report.mirror is not None:
        rows += report.mirror.rows()
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += format_waits(report)
    if report.mirror is not None:
        lines += ["", *report.mirror.lines()]
    summary = ", ".join(f"{k} {v}" for k, v in report.events.items())
    faults = ", ".join(f"{k} {v}" for k, v in report.faults.items())
    verdict = "OK" if report.violations == 0 else f"{report.violations} VIOLATION(S)"
    if report.problems:
        verdict += f", {len(report.problems)} PROBLEM(S) WITH THE RUN ITSELF"
    extra = [*report.notes, *(f"problem: {p}" for p in report.problems)]
    return "\n".join([f"soak ({report.mode}): {verdict}", f"events: {summary}", f"faults: {faults}", *lines, *extra])


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 10) % 10}"


def format_waits(report: Report) -> list[str]:
    """Each partition's longest wait, one line per partition (nothing for a run without them)."""
    if not report.waits:
        return []
    rows = [("partition", "longest wait", "offset", "acknowledged", "delivered")]
    rows += [
        (f"[{p}]", f"{w.seconds:.1f} s", str(w.offset), _clock(w.acked_at), _clock(w.delivered_at))
        for p, w in sorted(report.waits.items())
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.rjust(widths[i]) for i, cell in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return ["", "records waiting, acknowledged and not yet delivered:", *lines]


def format_matrix(report: Report, columns: tuple[str, ...]) -> str:
    """One line per kind of fault (``columns`` first, then anything else a finding names): how
    often it was injected, and the losses and duplicates attributed to it, allowed or not."""
    kinds = list(columns) + sorted(
        {c.fault for table in (report.lost, report.duplicated) for c in table} - set(columns)
    )
    rows = [("fault", "injected", "lost", "lost NOT allowed", "duplicated", "duplicated NOT allowed")]
    for kind in kinds:
        def count(table: dict[Cause, Finding], allowed: bool, kind: str = kind) -> str:
            return str(sum(f.count for c, f in table.items() if c.fault == kind and c.allowed == allowed))

        rows.append((
            kind, str(report.faults.get(kind, 0)), count(report.lost, True), count(report.lost, False),
            count(report.duplicated, True), count(report.duplicated, False),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(widths[i]) if i else cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
