"""The soak's checker: every acknowledged event against what was delivered, committed and injected.

In the spirit of Jepsen's Kafka checker, it judges a whole history after the fact, from records
that do not depend on jetkafka telling the truth: the processors' append-only event log, the
producer's acknowledgements, the fault schedule as executed, and ZooKeeper's own transaction log
(:mod:`tests.soak.fencing`). A record is (partition, offset, id): a producer retry may write an
id twice, and a broker that loses records may acknowledge one offset twice. It reports, each as
a count with examples:

**lost**
    acknowledged records never delivered. Allowed only where ``docs/guarantees.md`` allows it:
    records deleted from the broker before anyone read them (an ``out_of_range`` fault, between
    the committed offset at the deletion and the deletion point), records a forward reset
    skipped on purpose, and records the broker itself lost (their offset acknowledged again for
    another record: not jetkafka's doing, and noted). Every other one is a failure, told apart
    as *skipped* (the group committed past it) or *stalled* (the partition never got that far).
**duplicated**
    every delivery of a record after its first, attributed to what made it happen, in this
    order: a reset that moved the partition to it or below in between (allowed: the re-read is
    what a reset is for); the committed offset lowered outside any reset (a failure); a delivery
    by a process that did not hold the partition, such as a zombie's batch started after its
    session expired (a failure); the server's expiry of the first deliverer's session, with the
    offset committed neither at the expiry nor since (allowed for a SIGKILL, a zombie or a
    ZooKeeper freeze past the session timeout in a plain run, never in a Spark run); otherwise
    the fault around it (graceful leave, hot deploy, pause, a short ZooKeeper outage, an
    injected processor failure, ...), where the guarantee is zero: a failure.
**out of order**
    within one process's hold of a partition (one owner node's life, from the transaction log),
    offsets must strictly increase, except across a backwards reset of that partition.
**foreign commits / offsets gone back**
    from :mod:`tests.soak.fencing`: offset writes by a session that did not own the partition at
    that zxid, and offsets lowered outside a reset's transaction.
**ownerless**
    a partition whose owner node was gone (released, or its session closed or expired) and not
    created again for more than ``OWNERLESS_S`` while ZooKeeper served: a freed partition must be
    taken at once.

Deliveries are attributed by wall-clock time; the processes, ZooKeeper and the schedule share
one machine's clock. ``TOLERANCE_S`` absorbs the gap between a callback's timestamp and the
server's millisecond timestamp of the transaction it raced with.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise

from tests.soak.fencing import Session, ZooKeeperHistory
from tests.soak.history import Callback, Delivery, Fault
from tests.soak.report import Cause, Finding, Report

TOLERANCE_S = 0.1
# A fault's effects (a rebalance, a re-read) can show a few seconds after it ends.
AFTERMATH_S = 15.0
RESET_KINDS = frozenset({"reset_earliest", "reset_offset", "reset_time"})
# Faults that end a session by expiry; a plain run's at-least-once delivery allows re-reading
# the uncommitted part of what the expired instance held.
EXPIRY_KINDS = frozenset({"kill", "zombie", "zk_expire"})
# A freed partition must be taken again at once (guarantees: within about a second of a graceful
# release); this much, with ZooKeeper serving, is a failure even on a loaded machine.
OWNERLESS_S = 5.0
ZOOKEEPER_OUTAGES = frozenset({"zk_disconnect", "zk_expire", "zk_restart"})


class _Timeline:
    """Faults, sessions and holds, indexed for the questions the attribution asks."""

    def __init__(self, faults: list[Fault], callbacks: list[Callback], zk: ZooKeeperHistory, mode: str) -> None:
        self.zk = zk
        self.mode = mode
        self.faults = sorted(faults, key=lambda f: f.start)
        # Injected processor failures are faults too: each hit one partition of one process.
        self.faults += [
            Fault("processor_raise", c.at, c.at, [c.pid], [c.partition] if c.partition >= 0 else [], {"detail": c.detail})
            for c in callbacks
            if c.kind == "R"
        ]
        self.faults.sort(key=lambda f: f.start)
        self._starts = [f.start for f in self.faults]
        self.tails_lost: dict[int, int] = {}  # partition -> lowest offset the broker gave out twice
        # Each partition a reset moved, as ZooKeeper applied it: (time, old, new, fault kind).
        kind_of = {str(f.detail.get("id")): f.kind for f in self.faults if f.kind in RESET_KINDS}
        self.resets: dict[int, list[tuple[float, int, int, str]]] = defaultdict(list)
        for w in zk.writes:
            if w.reset_id is not None and w.offset is not None and w.previous is not None:
                self.resets[w.partition].append((w.time, w.previous, w.offset, kind_of.get(w.reset_id, "reset")))
        self._sessions: dict[int, list[Session]] = defaultdict(list)
        for s in zk.sessions.values():
            if s.pid is not None and s.opened is not None:
                self._sessions[s.pid].append(s)
        for sessions in self._sessions.values():
            sessions.sort(key=lambda s: s.opened or 0)
        self._holds: dict[tuple[int, str, int], list[tuple[float, float, int]]] = defaultdict(list)
        for h in zk.holds:
            pid = zk.sessions[h.session].pid if h.session in zk.sessions else None
            if pid is not None:
                self._holds[(pid, h.topic, h.partition)].append((h.start, h.end if h.end is not None else float("inf"), h.start_zxid))
        for holds in self._holds.values():
            holds.sort()
        # Offsets lowered outside any reset: (time, new offset, writer's pid) per partition.
        self.rewinds: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
        for w in zk.backward_writes:
            writer = zk.sessions.get(w.session)
            self.rewinds[w.partition].append((w.time, w.offset or 0, writer.pid if writer and writer.pid else -1))

    def session_at(self, pid: int, at: float) -> Session | None:
        """The newest session the process had opened by ``at``."""
        found = None
        for s in self._sessions.get(pid, []):
            if (s.opened or 0) <= at:
                found = s
        return found

    def hold_at(self, pid: int, topic: str, partition: int, at: float) -> int | None:
        """The start zxid of the process's hold of the partition that had begun by ``at``."""
        found = None
        for start, _end, zxid in self._holds.get((pid, topic, partition), []):
            if start <= at:
                found = zxid
        return found

    def held(self, pid: int, topic: str, partition: int, at: float) -> bool:
        return any(
            start - TOLERANCE_S <= at <= end + TOLERANCE_S for start, end, _ in self._holds.get((pid, topic, partition), [])
        )

    def reset_covering(self, partition: int, offset: int, after: float, before: float) -> str | None:
        """The kind of a reset of ``partition`` to ``offset`` or below, applied between two times.

        Such a reset re-reads ``offset`` on purpose, whether it was committed (below the reset's
        old offset) or only delivered (a commit still on its way when the reset was applied).
        """
        for at, _old, new, kind in self.resets.get(partition, []):
            if new <= offset and after - TOLERANCE_S <= at <= before + TOLERANCE_S:
                return kind
        return None

    def rewound(self, partition: int, offset: int, after: float, before: float) -> tuple[float, int] | None:
        """``(time, writer pid)`` of a lowering of the partition's offset to ``offset`` or below,
        outside a reset, in between; None if there was none."""
        for at, new, pid in self.rewinds.get(partition, []):
            if new <= offset and after - TOLERANCE_S <= at <= before + TOLERANCE_S:
                return at, pid
        return None

    def stalled_after(self, topic: str, partition: int) -> Fault | None:
        """Where to look when a partition stalled: the latest fault that touched its last holder
        (or the partition itself) before its last progress, a take-over or an offset that moved."""
        holds = [h for h in self.zk.holds if (h.topic, h.partition) == (topic, partition)]
        if not holds:
            return None
        last = max(holds, key=lambda h: h.start)
        holder = self.zk.sessions.get(last.session)
        pid = holder.pid if holder is not None and holder.pid is not None else -1
        moves = [w.time for w in self.zk.writes if (w.topic, w.partition) == (topic, partition) and w.offset != w.previous]
        progress = max([last.start, *moves])
        candidates = [
            f for f in self.faults
            if f.kind != "processor_raise"
            and f.start <= progress + AFTERMATH_S
            and (partition in f.partitions if f.partitions else pid in f.pids)
        ]
        return candidates[-1] if candidates else None

    def reset_skipping(self, partition: int, offset: int) -> str | None:
        """The kind of a forward reset of ``partition`` that jumped over ``offset``."""
        for _at, old, new, kind in self.resets.get(partition, []):
            if old <= offset < new:
                return kind
        return None

    def fault_for_expiry(self, pid: int, closed: float, timeout: float) -> Fault | None:
        candidates = [
            f for f in self.faults
            if pid in f.pids and f.start - TOLERANCE_S <= closed <= f.end + timeout + AFTERMATH_S and f.kind != "processor_raise"
        ]
        return candidates[-1] if candidates else None

    def context(self, d: Delivery, pids: Iterable[int], scheduled_only: bool = False) -> Fault | None:
        """The fault a re-delivery ``d`` happened under.

        An injected failure of the same process and partition a moment before comes first (its
        retry is the likely culprit); otherwise the latest scheduled fault that touched these
        processes or this partition and ended less than ``AFTERMATH_S`` before.
        """
        pids = set(pids)
        i = bisect.bisect_right(self._starts, d.at + TOLERANCE_S)
        scheduled = None
        for f in reversed(self.faults[:i]):
            if f.start < d.at - 300:
                break
            if f.kind == "processor_raise":
                if not scheduled_only and d.pid in f.pids and (not f.partitions or d.partition in f.partitions) and d.at - f.start <= 5.0:
                    return f
                continue
            if scheduled is None and d.at <= f.end + AFTERMATH_S and (pids & set(f.pids) or d.partition in f.partitions):
                scheduled = f
        return scheduled


def _lost_tail_fault(t: _Timeline, partition: int, offset: int, at: float) -> Fault | None:
    """The broker restart that lost ``partition``'s tail just above ``offset`` around ``at``."""
    cut = t.tails_lost.get(partition)
    if cut is None or not offset < cut:
        return None
    for f in t.faults:
        if f.kind == "broker_restart" and f.start - AFTERMATH_S <= at <= f.end + AFTERMATH_S:
            return f
    return None


def _expiry_kind(t: _Timeline, session: Session, timeout: float) -> str:
    fault = t.fault_for_expiry(session.pid or -1, session.closed or 0, timeout)
    return fault.kind if fault is not None else "unscheduled session expiry"


def _explain(first: Delivery, again: Delivery, t: _Timeline, timeout: float) -> Cause:
    """Why ``again`` delivered the record ``first`` had delivered already.

    In order: a reset that moved the partition to the record or below in between (allowed); the
    partition's offset lowered outside a reset in between; ``again`` delivered by a process that
    did not hold the partition then; ``first`` delivered by a process whose session the server
    expired afterwards, with the offset committed neither at the expiry nor since (allowed for
    at-least-once delivery: the crashed or frozen instance's uncommitted batches); otherwise what
    happened to the partition, named after the fault around ``again``.
    """
    p, o, topic = first.partition, first.offset, first.topic
    reset = t.reset_covering(p, o, first.at, again.at)
    if reset is not None:
        return Cause(reset, "re-read on purpose by a backwards reset", True)
    restart = _lost_tail_fault(t, p, o, first.at)
    if restart is not None:
        # The broker lost this partition's tail just above the record: what was read after the
        # last commit is read again from it (docs/processors.md, offsets out of range).
        return Cause(restart.kind, "read again after the broker lost the partition's tail", True)

    def around() -> str:
        fault = t.context(again, (first.pid, again.pid))
        return fault.kind if fault is not None else "unattributed"

    rewind = t.rewound(p, o, first.at, again.at)
    if rewind is not None:
        at, pid = rewind
        fault = t.context(Delivery(pid, at, topic, p, o, first.id, -1), (pid,), scheduled_only=True)
        return Cause(fault.kind if fault else "unattributed", "re-read after the committed offset went back outside any reset", False)
    late = t.session_at(again.pid, again.at)
    if not t.held(again.pid, topic, p, again.at):
        if late is not None and late.expired and late.closed is not None and late.closed < again.at - TOLERANCE_S:
            return Cause(_expiry_kind(t, late, timeout), "batch started after the instance's session had expired", False)
        return Cause(around(), "delivered by an instance that did not hold the partition", False)
    session = t.session_at(first.pid, first.at)
    if session is not None and session.expired and session.closed is not None:
        kind = _expiry_kind(t, session, timeout)
        if first.at > session.closed + TOLERANCE_S:
            return Cause(kind, "batch started after the instance's session had expired", False)
        if again.at >= session.closed - TOLERANCE_S:
            committed = t.zk.committed_at(topic, p, session.closed)
            if committed is not None and o < committed:
                return Cause(kind, "re-read below the offset committed before the expiry", False)
            # Nobody may have committed past it since: the re-read must come from the expiry.
            if (t.zk.committed_at(topic, p, again.at) or -1) <= o:
                allowed = t.mode == "batch" and kind in EXPIRY_KINDS
                why = "uncommitted batches of an expired session" if allowed else "re-delivered after a session expiry"
                return Cause(kind, why, allowed)
    if not t.held(first.pid, topic, p, first.at):
        return Cause(around(), "first delivered by an instance that did not hold the partition", False)
    if (t.zk.committed_at(topic, p, again.at) or -1) > o:
        return Cause(around(), "re-read below the committed offset", False)
    if first.pid == again.pid and t.hold_at(first.pid, topic, p, first.at) == t.hold_at(again.pid, topic, p, again.at):
        return Cause(around(), "delivered twice within one hold", False)
    return Cause(around(), "handed over without committing what was delivered", False)


def _lost_cause(partition: int, offset: int, t: _Timeline, topic: str) -> Cause:
    for f in t.faults:
        if f.kind == "out_of_range" and partition in f.partitions:
            low, high = f.detail.get("committed", 0), f.detail.get("deleted_below", 0)
            if low <= offset < high:
                return Cause("out_of_range", "deleted from the broker before anyone read it", True)
    reset = t.reset_skipping(partition, offset)
    if reset is not None:
        return Cause(reset, "skipped on purpose by a forward reset", True)
    final = t.zk.committed_at(topic, partition, float("inf"))
    if final is not None and final > offset:
        return Cause("unattributed", "skipped: the group committed past it", False)
    stuck = t.stalled_after(topic, partition)
    return Cause(stuck.kind if stuck else "unattributed", "stalled: the partition never got this far", False)


def check(
    *,
    mode: str,
    topic: str,
    acked: dict[int, tuple[int, int]],
    deliveries: list[Delivery],
    callbacks: list[Callback],
    faults: list[Fault],
    zk: ZooKeeperHistory,
    session_timeout_s: float,
) -> Report:
    """Judge one run. ``mode`` is ``"batch"`` (at-least-once) or ``"spark"`` (exactly-once output)."""
    t = _Timeline(faults, callbacks, zk, mode)
    notes: list[str] = []
    # A record is (partition, offset, id). A producer retry through a broker restart may write one
    # id twice, at two offsets: two records, each to be delivered once. A broker that loses
    # acknowledged records may give one offset to two ids: two records, of which one is gone.
    by_record: dict[tuple[int, int, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_record[(d.partition, d.offset, d.id)].append(d)
    ids_at: dict[tuple[int, int], list[int]] = defaultdict(list)
    for ident, where in acked.items():
        ids_at[where].append(ident)
    copies = sum(1 for (p, o, ident) in by_record if ident in acked and acked[ident] != (p, o))
    if copies:
        notes.append(f"{copies} record(s) delivered that are second copies of acknowledged ids (producer retries)")

    lost: dict[Cause, Finding] = defaultdict(Finding)
    broker_lost = 0
    for ident, (p, o) in sorted(acked.items()):
        if (p, o, ident) in by_record:
            continue
        if len(ids_at[(p, o)]) > 1:
            broker_lost += 1
            cause = Cause("broker_restart", "the broker acknowledged it, then gave its offset to another record", True)
        else:
            cause = _lost_cause(p, o, t, topic)
        lost[cause].add(f"id {ident} at {topic}[{p}] offset {o}")
    reused = sum(len(ids) - 1 for ids in ids_at.values() if len(ids) > 1)
    if reused:
        notes.append(
            f"the broker acknowledged {reused} offset(s) a second time, for another record: it had lost the first "
            f"(a defect of the dev broker, not of jetkafka); {broker_lost} of those lost records were never delivered"
        )
    # Where the broker lost each partition's tail: the lowest offset it gave out twice.
    t.tails_lost = {}
    for (p, o), ids in ids_at.items():
        if len(ids) > 1 and (p not in t.tails_lost or o < t.tails_lost[p]):
            t.tails_lost[p] = o
    duplicated: dict[Cause, Finding] = defaultdict(Finding)
    for (p, o, _ident), ds in by_record.items():
        if len(ds) < 2:
            continue
        ds.sort(key=lambda d: (d.at, d.seq))
        for first, again in pairwise(ds):
            cause = _explain(first, again, t, session_timeout_s)
            duplicated[cause].add(
                f"id {first.id} {topic}[{p}]@{o}: pid {first.pid} at {first.at:.3f}, again pid {again.pid} at {again.at:.3f}"
            )

    # Offsets the broker gave out twice: it had lost the first records there (its log lost its
    # tail), and jetkafka's out-of-range policy then goes on at the new end, below the committed
    # offset. A rewind over such offsets only is that policy at work, not a violation.
    reacked = {where for where, ids in ids_at.items() if len(ids) > 1}

    def truncated(p: int, first: int, last: int) -> bool:
        return all((p, o) in reacked for o in range(first, last + 1))

    rewinds_after_truncation = 0
    out_of_order = Finding()
    if mode == "batch":
        last: dict[tuple[int, int, int | None], Delivery] = {}
        for d in sorted(deliveries, key=lambda d: d.seq):
            key = (d.pid, d.partition, t.hold_at(d.pid, d.topic, d.partition, d.at))
            prev = last.get(key)
            if prev is not None and d.offset <= prev.offset and t.reset_covering(d.partition, d.offset, prev.at, d.at) is None:
                if truncated(d.partition, d.offset, prev.offset):
                    rewinds_after_truncation += 1
                else:
                    out_of_order.add(
                        f"pid {d.pid} {d.topic}[{d.partition}]: offset {d.offset} at {d.at:.3f} after {prev.offset} "
                        f"at {prev.at:.3f}"
                    )
            last[key] = d

    foreign, back = Finding(), Finding()
    label = {sid: s.label() for sid, s in zk.sessions.items()}
    for w in zk.foreign_writes:
        owner = label.get(w.owner, "nobody") if w.owner is not None else "nobody"
        foreign.add(
            f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] := {w.offset} by session "
            f"{label.get(w.session, hex(w.session))} while owned by {owner}"
        )
    lowered_to_the_end = 0
    for w in zk.backward_writes:
        if w.previous is not None and w.offset is not None and truncated(w.partition, w.offset, w.previous - 1):
            lowered_to_the_end += 1
            continue
        back.add(f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] {w.previous} -> {w.offset} by {label.get(w.session)}")
    if lowered_to_the_end or rewinds_after_truncation:
        notes.append(
            f"{lowered_to_the_end} committed offset(s) lowered to the log's new end, and {rewinds_after_truncation} "
            "rewind(s) within a hold, over offsets the broker lost and gave out again (on_out_of_range past the "
            "end: allowed)"
        )
    if not zk.transactions:
        notes.append("no ZooKeeper transactions were read: fencing could not be checked")
        foreign.add("the ZooKeeper transaction log is missing or empty")

    ownerless = _ownerless(t, zk)
    expired = []
    for s in zk.expiries():
        fault = t.fault_for_expiry(s.pid or -1, s.closed or 0, session_timeout_s)
        expired.append(f"{s.label()} expired at {s.closed:.3f} ({fault.kind if fault else 'outside every fault'})")

    events = {
        "acknowledged": len(acked),
        "delivered_acknowledged": sum(1 for ident, (p, o) in acked.items() if (p, o, ident) in by_record),
        "deliveries": len(deliveries),
        "delivered_unacknowledged": len({ident for (_p, _o, ident) in by_record} - set(acked)),
        "zookeeper_transactions": zk.transactions,
        "offset_writes": len(zk.writes),
    }
    kinds = Counter(f.kind for f in t.faults)
    return Report(
        mode, events, dict(sorted(kinds.items())), dict(lost), dict(duplicated), out_of_order, foreign, back, expired,
        notes, ownerless=ownerless,
    )


def _ownerless(t: _Timeline, zk: ZooKeeperHistory) -> Finding:
    """Partitions left without an owner for more than ``OWNERLESS_S`` while ZooKeeper served.

    The time between one owner node's end (release, close or expiry) and the next one's
    creation, less any part of it spent in a ZooKeeper outage the soak injected.
    """
    outages = [(f.start, f.end + 2.0) for f in t.faults if f.kind in ZOOKEEPER_OUTAGES]
    found = Finding()
    by_partition: dict[tuple[str, int], list] = defaultdict(list)
    for h in zk.holds:
        by_partition[(h.topic, h.partition)].append(h)
    for (topic, p), holds in sorted(by_partition.items()):
        holds.sort(key=lambda h: h.start)
        for before, after in pairwise(holds):
            if before.end is None:
                continue
            gap = after.start - before.end
            served = gap - sum(max(0.0, min(after.start, e) - max(before.end, s)) for s, e in outages)
            if served <= OWNERLESS_S:
                continue
            owner = zk.sessions.get(before.session)
            pid = owner.pid if owner is not None and owner.pid is not None else -1
            fault = t.context(Delivery(pid, before.end, topic, p, 0, -1, -1), (pid,), scheduled_only=True)
            found.add(
                f"{topic}[{p}] without an owner for {gap:.1f} s from {before.end:.3f} ({before.how} by "
                f"{owner.label() if owner else hex(before.session)}, around {fault.kind if fault else 'no fault'})"
            )
    return found
