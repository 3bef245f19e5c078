"""The offset mirror judged: Kafka's copy of the group's offsets against ZooKeeper's, the authority.

With ``channel.commit_to_kafka`` every commit that landed in ZooKeeper is copied to the group
offsets of the mirror group, for lag tools. The inputs are what a lag tool saw
(:mod:`tests.soak.mirror_watch`: Kafka's committed offset of each partition about ten times a
second, and once after every member stopped) and ZooKeeper's own record of every commit
(:mod:`tests.soak.fencing`, from the server's transaction log).

Per partition, ZooKeeper's commits are a sequence of offsets in landing order (a reset, or an
out-of-range move to a log's new end, puts a lower one after a higher one). The mirror copies
landed commits in that order, skipping the ones a newer one replaced before it was sent, so every
offset Kafka shows must be one ZooKeeper had committed, and each must come no earlier in that
sequence than the one shown before. Each observation is placed at the earliest commit it can be
(the most lenient reading: a value ZooKeeper held twice is taken as its first time since the
previous observation's place). Violations, each with the partition, the offsets, the times and
the member whose ZooKeeper commit had the offset Kafka showed (the instance that mirrored it):

**mirror ahead**
    Kafka's offset is above every offset ZooKeeper had committed for the partition by the
    observation (plus ``TOLERANCE_S``): a copy of a commit that never landed.
**mirror went back**
    Kafka's offset is below the previous observation's, and ZooKeeper's committed offset did
    not go below that one since ZooKeeper had it (no reset, no out-of-range move): an older
    offset written over a newer one, as an instance that lost the partition (killed, a zombie
    thawed) would write over the new owner's.
**mirror out of order**
    Kafka's offset is one ZooKeeper had not committed since the offset Kafka showed before,
    and neither of the above: a stale copy that moved Kafka up to an offset from before a
    reset, or an offset ZooKeeper never held.
**mirror behind at the end**
    after every member stopped, Kafka's offset of a partition is not ZooKeeper's final one.

Allowed, and listed apart (*lost by the broker*): Kafka's copy going back to an offset
ZooKeeper had committed before, across a broker restart, when the higher one was shown less than
``BROKER_LOSS_S`` before the broker went down: the dev stack's broker loses the writes of its
last moments when it is killed (acknowledged records too, which the checker reports the same
way), and its copy of the group offsets with them. The members keep mirroring: the next copy
of the partition puts Kafka's right again.

Figures: how long after a ZooKeeper commit the first observation showed it or a later commit
(p50, p99, max; it includes up to one poll interval of sampling, and the time the broker was
down), the commits never shown while polling, and the offset gap between ZooKeeper's committed
offset and Kafka's at each observation.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from tests.soak.fencing import ZooKeeperHistory
from tests.soak.history import MirrorLog, MirrorObservation
from tests.soak.report import Finding
from tests.soak.timeline import TOLERANCE_S

# How recent a copy a broker restart may lose (the dev broker lost about a second of writes).
BROKER_LOSS_S = 2.0


@dataclass(frozen=True, slots=True)
class Commit:
    """A change of a partition's committed offset in ZooKeeper."""

    at: float
    offset: int
    session: int


def zookeeper_commits(zk: ZooKeeperHistory, topic: str, partition: int) -> list[Commit]:
    """The partition's committed offsets in landing order, changes only (a take writes the
    offset it found again, which is no commit)."""
    out: list[Commit] = []
    for w in zk.writes:
        if (w.topic, w.partition) == (topic, partition) and w.offset is not None and (not out or out[-1].offset != w.offset):
            out.append(Commit(w.time, w.offset, w.session))
    return out


@dataclass
class MirrorVerdict:
    """The mirror's findings (each a violation) and its figures."""

    ahead: Finding = field(default_factory=Finding)
    went_back: Finding = field(default_factory=Finding)
    out_of_order: Finding = field(default_factory=Finding)
    behind_at_end: Finding = field(default_factory=Finding)
    figures: dict[str, Any] = field(default_factory=dict)
    # Copies the broker lost at a restart (allowed: see the module).
    lost_by_broker: list[str] = field(default_factory=list)
    # What keeps the mirror from being judged at all (no final read): the run proves nothing of it.
    problems: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return self.ahead.count + self.went_back.count + self.out_of_order.count + self.behind_at_end.count

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """The checker's table rows."""
        return [
            ("mirror ahead", "-", "Kafka's copy above every offset ZooKeeper had committed", "NO", str(self.ahead.count)),
            ("mirror went back", "-", "Kafka's copy lowered while ZooKeeper's was not", "NO", str(self.went_back.count)),
            ("mirror out of order", "-", "Kafka's copy moved to an offset ZooKeeper had not committed since", "NO",
             str(self.out_of_order.count)),
            ("mirror behind at end", "-", "Kafka's copy unlike ZooKeeper's once the group stopped", "NO",
             str(self.behind_at_end.count)),
        ]

    def lines(self) -> list[str]:
        """The figures, then a few examples of each finding."""
        f = self.figures
        summary = (
            f"offset mirror: {f.get('polls', 0)} polls ({f.get('failed_polls', 0)} failed); a ZooKeeper commit shown in "
            f"Kafka after p50 {_s(f.get('trail_p50_s'))}, p99 {_s(f.get('trail_p99_s'))}, max {_s(f.get('trail_max_s'))} "
            f"({f.get('commits', 0)} commits, {f.get('commits_never_shown', 0)} never shown while polling); offset gap "
            f"p50 {f.get('gap_p50', '-')}, p99 {f.get('gap_p99', '-')}, max {f.get('gap_max', '-')}"
        )
        out = [summary]
        if f.get("trail_max_at"):
            out.append(f"offset mirror: the longest trail after {f['trail_max_at']}")
        for name, finding in self.findings().items():
            out += [f"{name}: {example}" for example in finding.examples[:3]]
        if self.lost_by_broker:
            out.append(f"offset mirror: {len(self.lost_by_broker)} copies lost by the broker at a restart (allowed), e.g. "
                       f"{self.lost_by_broker[0]}")
        return out

    def findings(self) -> dict[str, Finding]:
        return {
            "mirror ahead": self.ahead, "mirror went back": self.went_back,
            "mirror out of order": self.out_of_order, "mirror behind at the end": self.behind_at_end,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            **{name.replace(" ", "_"): vars(finding) for name, finding in self.findings().items()},
            "figures": self.figures, "problems": self.problems, "lost_by_broker": self.lost_by_broker,
        }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class _Writers:
    """Who mirrored an offset: the member whose ZooKeeper commit set the partition to it (a take
    re-writes the offset it found, and is no commit), and whether it still held the partition
    when Kafka showed it."""

    def __init__(self, zk: ZooKeeperHistory, topic: str, names: Mapping[int, str]) -> None:
        self.zk, self.topic, self.names = zk, topic, names

    def who(self, partition: int, commits: list[Commit], offset: int, at: float) -> str:
        c = next((c for c in reversed(commits) if c.offset == offset and c.at <= at + TOLERANCE_S), None)
        if c is None:
            return "no member: ZooKeeper never held it"
        session = self.zk.sessions.get(c.session)
        pid = session.pid if session is not None else None
        who = f"{self.names.get(pid, '?')} (pid {pid})" if pid is not None else f"session 0x{c.session:x}"
        holds = [h for h in self.zk.holds if h.session == c.session and (h.topic, h.partition) == (self.topic, partition)]
        held = any(h.start <= at + TOLERANCE_S and (h.end is None or h.end >= at - TOLERANCE_S) for h in holds)
        ended = [h.end for h in holds if h.end is not None and h.end < at - TOLERANCE_S]
        state = "" if held or not ended else f", which no longer held the partition (its hold ended at {max(ended):.3f})"
        return f"committed in ZooKeeper at {c.at:.3f} by {who}{state}"


def _lost_at_restart(shown_at: float, seen_at: float, restarts: Iterable[tuple[float, float]]) -> bool:
    """Whether a copy shown at ``shown_at`` and found gone at ``seen_at`` spans a broker restart
    that began within ``BROKER_LOSS_S`` of it."""
    return any(start - BROKER_LOSS_S <= shown_at <= end and seen_at >= start for start, end in restarts)


def _follow(
    partition: int, commits: list[Commit], polls: list[MirrorObservation], topic: str, verdict: MirrorVerdict,
    writers: _Writers, restarts: Iterable[tuple[float, float]] = (),
) -> list[tuple[float, int]]:
    """Walk Kafka's offsets along ZooKeeper's commits, recording each violation; returns, per
    observation, its time and the index of the commit it showed (-1: none yet)."""
    times = [c.at for c in commits]
    highest = list(accumulate((c.offset for c in commits), max))  # the highest committed up to each
    pos, shown, placed = -1, None, []
    for o in polls:
        lost = False  # a copy the broker lost: judged on from the copy it had (see the module)
        if shown is None or o.offset != shown.offset:
            by = bisect.bisect_right(times, o.at + TOLERANCE_S)  # the commits that had landed by then
            match = next((j for j in range(max(pos, 0), by) if commits[j].offset == o.offset), None)
            if match is not None:
                pos = match
            else:
                where = f"{topic}[{partition}] Kafka {o.offset} at {o.at:.3f}"
                before = f" after {shown.offset} at {shown.at:.3f}" if shown is not None else ""
                writer = writers.who(partition, commits, o.offset, o.at)
                if not by or o.offset > highest[by - 1]:
                    top = highest[by - 1] if by else None
                    verdict.ahead.add(f"{where}{before}: ZooKeeper had committed at most {top} by then ({writer})")
                elif (
                    shown is not None
                    and o.offset < shown.offset
                    and any(c.offset == o.offset for c in commits[: pos + 1])
                    and _lost_at_restart(shown.at, o.at, restarts)
                ):
                    verdict.lost_by_broker.append(f"{where}{before}")
                    lost = True
                elif shown is not None and o.offset < shown.offset and not any(
                    commits[j].offset < shown.offset for j in range(pos + 1, by)
                ):
                    had = pos >= 0 and commits[pos].offset == shown.offset
                    since = f"since {commits[pos].at:.3f}" if had else "(not a commit of its own)"
                    verdict.went_back.add(
                        f"{where}{before}: ZooKeeper had {shown.offset} {since} and committed nothing lower after it "
                        f"(the offset Kafka went back to: {writer})"
                    )
                else:
                    verdict.out_of_order.add(
                        f"{where}{before}: not committed in ZooKeeper since the offset Kafka showed before ({writer})"
                    )
            if not lost:
                shown = o
        placed.append((o.at, pos))
    return placed


def _trails(commits: list[Commit], placed: list[tuple[float, int]]) -> tuple[list[tuple[float, int]], int]:
    """For each commit, how long until an observation showed it or a later one (with the
    commit's index); and how many no observation ever showed."""
    out: list[tuple[float, int]] = []
    shown = 0
    for at, pos in placed:
        while shown <= pos:
            out.append((max(0.0, at - commits[shown].at), shown))
            shown += 1
    return out, len(commits) - shown


def judge_mirror(
    log: MirrorLog, zk: ZooKeeperHistory, topic: str, partitions: Iterable[int], names: Mapping[int, str] | None = None,
    broker_restarts: Iterable[tuple[float, float]] = (),
) -> MirrorVerdict:
    """Judge the mirror of ``topic``'s ``partitions`` (see the module); ``names``: each
    member's name by its pid, to name who mirrored an offset; ``broker_restarts``: when the
    broker was down (start, end)."""
    restarts = list(broker_restarts)
    verdict = MirrorVerdict()
    writers = _Writers(zk, topic, names or {})
    polls: dict[int, list[MirrorObservation]] = defaultdict(list)
    finals: dict[int, int] = {}
    for o in log.observations:
        if o.final:
            finals[o.partition] = o.offset
        else:
            polls[o.partition].append(o)
    trails: list[float] = []
    gaps: list[int] = []
    never = total = 0
    worst: tuple[float, str] | None = None
    for p in sorted(set(partitions) | set(polls)):
        commits = zookeeper_commits(zk, topic, p)
        placed = _follow(p, commits, polls[p], topic, verdict, writers, restarts)
        shown, missing = _trails(commits, placed)
        total, never = total + len(commits), never + missing
        for seconds, i in shown:
            trails.append(seconds)
            if worst is None or seconds > worst[0]:
                worst = (seconds, f"{topic}[{p}] offset {commits[i].offset}, committed at {commits[i].at:.3f}")
        for o in polls[p]:
            committed = zk.committed_at(topic, p, o.at)
            if committed is not None:
                gaps.append(abs(committed - o.offset))
        _judge_end(p, commits, finals, log, topic, verdict, writers)
    if not any(o.final for o in log.observations):
        verdict.problems.append("Kafka's offsets were not read after the members stopped: the mirror's end is not judged")
    times = {o.at for o in log.observations if not o.final}
    verdict.figures = {
        "polls": len(times) + len(log.failed_polls), "failed_polls": len(log.failed_polls),
        "commits": total, "commits_never_shown": never,
    }
    if trails:
        verdict.figures.update(
            trail_p50_s=round(_percentile(trails, 0.5), 3), trail_p99_s=round(_percentile(trails, 0.99), 3),
            trail_max_s=round(max(trails), 3), trail_max_at=worst[1] if worst else None,
        )
    if gaps:
        verdict.figures.update(gap_p50=int(_percentile(gaps, 0.5)), gap_p99=int(_percentile(gaps, 0.99)), gap_max=max(gaps))
    return verdict


def _judge_end(
    p: int, commits: list[Commit], finals: dict[int, int], log: MirrorLog, topic: str, verdict: MirrorVerdict,
    writers: _Writers,
) -> None:
    """Kafka's final offset of ``p`` against ZooKeeper's last commit (nothing to judge without a final read)."""
    if not any(o.final for o in log.observations) or not commits:
        return
    last, kafka = commits[-1], finals.get(p)
    if kafka == last.offset:
        return
    copied = max((i for i, c in enumerate(commits) if c.offset == kafka), default=None)
    if copied is None:
        detail = "Kafka has no offset" if kafka is None else "Kafka's offset is none ZooKeeper held"
    else:
        after = commits[copied + 1 :]
        detail = f"the {len(after)} commit(s) after it, from {after[0].at:.3f} to {last.at:.3f}, never reached Kafka"
    verdict.behind_at_end.add(
        f"{topic}[{p}]: Kafka {kafka if kafka is not None else '-'}, ZooKeeper {last.offset} "
        f"({writers.who(p, commits, last.offset, last.at)}); {detail}"
    )
