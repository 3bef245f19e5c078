"""A run's faults, sessions, holds, resets and recovery ranges, indexed for the checker's questions.

Built once per judgement from the executed schedule, the processes' callbacks (an injected
processor failure is a fault too: it hit one partition of one process) and ZooKeeper's history
(:mod:`tests.soak.fencing`). Every question is asked about wall-clock times; ``TOLERANCE_S``
absorbs the gap between a callback's timestamp and the server's millisecond timestamp of the
transaction it raced with.

A delivery is placed in a hold by its fencing token when it carries one (a dispatcher's
request), and otherwise by its process and time.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from tests.soak.fencing import Hold, Session, ZooKeeperHistory
from tests.soak.history import Batch, Callback, Delivery, Fault

TOLERANCE_S = 0.1
# How long after SIGCONT a thawed process may still be calling its processor with the batch a
# worker had started at the freeze: the scheduler of a loaded 2-CPU machine decides when that
# thread runs again.
THAW_S = 1.0
# A fault's effects (a rebalance, a re-read) can show a few seconds after it ends.
AFTERMATH_S = 15.0
# The cure of a poisoned partition (tests.soak.conditions) is a reset like the others.
RESET_KINDS = frozenset({"reset_earliest", "reset_offset", "reset_time", "cure"})


class Timeline:
    def __init__(
        self, faults: list[Fault], callbacks: list[Callback], zk: ZooKeeperHistory,
        server_hangs: list[float] = (), timeout: float = 10.0, batches: Iterable[Batch] = (),
    ) -> None:
        self.zk = zk
        # When each batch returned, by its process, partition and start (the recorders' E lines).
        self._batch_ends = {(b.pid, b.topic, b.partition, round(b.start, 6)): b.end for b in batches}
        self.faults = sorted(faults, key=lambda f: f.start)
        self.failures = [c for c in callbacks if c.kind == "R"]
        self.faults += [
            Fault("processor_raise", c.at, c.at, [c.pid], [c.partition] if c.partition >= 0 else [], {"detail": c.detail})
            for c in self.failures
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
        self._by_epoch: dict[tuple[str, int, int], Hold] = {}
        for h in zk.holds:
            self._by_epoch[(h.topic, h.partition, h.epoch)] = h
            pid = zk.sessions[h.session].pid if h.session in zk.sessions else None
            if pid is not None:
                self._holds[(pid, h.topic, h.partition)].append((h.start, h.end if h.end is not None else float("inf"), h.start_zxid))
        for holds in self._holds.values():
            holds.sort()
        self.expired_by_server = self._expired_by_server(server_hangs, timeout)
        # Offsets lowered outside any reset: (time, new offset, writer's pid) per partition.
        self.rewinds: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
        for w in zk.backward_writes:
            writer = zk.sessions.get(w.session)
            self.rewinds[w.partition].append((w.time, w.offset or 0, writer.pid if writer and writer.pid else -1))

    # -- sessions and holds ---------------------------------------------------------------------

    def session_at(self, pid: int, at: float) -> Session | None:
        """The newest session the process had opened by ``at``."""
        found = None
        for s in self._sessions.get(pid, []):
            if (s.opened or 0) <= at:
                found = s
        return found

    def hold_by_epoch(self, topic: str, partition: int, epoch: int) -> Hold | None:
        return self._by_epoch.get((topic, partition, epoch))

    def pid_of_epoch(self, topic: str, partition: int, epoch: int | None) -> int:
        """The process whose hold had this fencing token; -1 if none did."""
        hold = self._by_epoch.get((topic, partition, epoch)) if epoch is not None else None
        session = self.zk.sessions.get(hold.session) if hold is not None else None
        return session.pid if session is not None and session.pid is not None else -1

    def hold_of(self, d: Delivery) -> int | None:
        """The start zxid of the hold ``d`` was delivered under (by its token, else by its time)."""
        if d.epoch is not None:
            hold = self.hold_by_epoch(d.topic, d.partition, d.epoch)
            return hold.start_zxid if hold is not None else None
        found = None
        for start, _end, zxid in self._holds.get((d.pid, d.topic, d.partition), []):
            if start <= d.at:
                found = zxid
        return found

    def hold_end(self, d: Delivery) -> float | None:
        """When the hold ``d`` was delivered under ended (by its process and time); None if it
        did not, or none is known."""
        for start, end, _zxid in self._holds.get((d.pid, d.topic, d.partition), []):
            if start - TOLERANCE_S <= d.at <= end + TOLERANCE_S:
                return end if end != float("inf") else None
        return None

    def held(self, d: Delivery) -> bool:
        """Whether ``d``'s process held the partition when ``d`` happened (its token's hold, if known)."""
        if d.epoch is not None:
            hold = self.hold_by_epoch(d.topic, d.partition, d.epoch)
            if hold is None:
                return False
            end = hold.end if hold.end is not None else float("inf")
            return hold.start - TOLERANCE_S <= d.at <= end + TOLERANCE_S
        return any(
            start - TOLERANCE_S <= d.at <= end + TOLERANCE_S for start, end, _ in self._holds.get((d.pid, d.topic, d.partition), [])
        )

    def stale_hold(self, d: Delivery) -> Hold | None:
        """The hold ``d`` was sent under, if that hold had ended before ``d`` arrived."""
        if d.epoch is None:
            return None
        hold = self.hold_by_epoch(d.topic, d.partition, d.epoch)
        if hold is None or hold.end is None or d.at <= hold.end + TOLERANCE_S:
            return None
        return hold

    def freeze_in_hand(self, d: Delivery) -> Fault | None:
        """The SIGSTOP (a ``zombie`` fault) ``d`` may have been in hand at: its process was
        frozen holding ``d``'s partition, and ``d`` came within ``THAW_S`` of the SIGCONT (the
        fault's end, taken just after it)."""
        holds = self._holds.get((d.pid, d.topic, d.partition), [])
        for f in self.faults:
            if f.kind != "zombie" or d.pid not in f.pids or not f.end - TOLERANCE_S <= d.at <= f.end + THAW_S:
                continue
            if any(start - TOLERANCE_S <= f.start <= end + TOLERANCE_S for start, end, _ in holds):
                return f
        return None

    def timed_out_leave(self, d: Delivery, timeout: float) -> Fault | None:
        """The SIGTERM of ``d``'s process whose shutdown ran out of ``timeout`` (it exited 1)
        with ``d``'s batch in hand: started by then, and not returned (its ``E`` line later, or
        none: the process ended in it)."""
        for f in self.faults:
            if f.kind != "leave" or d.pid not in f.pids or f.detail.get("exit") != 1:
                continue
            cutoff = f.start + timeout
            end = self._batch_ends.get((d.pid, d.topic, d.partition, round(d.at, 6)))
            if d.at <= cutoff + TOLERANCE_S and (end is None or end > cutoff - TOLERANCE_S):
                return f
        return None

    # -- offsets, resets, recovery ranges -------------------------------------------------------

    def done(self, topic: str, partition: int, offset: int, at: float) -> bool:
        """Whether ``offset`` was finished for the group at ``at``: committed past, and not in a
        recovery range (recovery's offsets lie below the live committed offset until recovered);
        or, under ``ordering: key | none``, claimed finished by the committed value's map."""
        committed = self.zk.committed_at(topic, partition, at)
        if committed is None:
            return False
        if committed <= offset:
            return any(a <= offset < b for a, b in self.zk.finished_at(topic, partition, at))
        return not any(lo <= offset < hi for lo, hi in self.zk.ranges_at(topic, partition, at))

    def reset_covering(self, topic: str, partition: int, offset: int, after: float, before: float) -> str | None:
        """The kind of a reset of ``partition`` to ``offset`` or below, applied between two times.

        Such a reset re-reads ``offset`` on purpose, whether it was committed (below the reset's
        old offset) or only delivered (a commit still on its way when the reset was applied).
        A reset does not touch recovery ranges, so one applied earlier, while ``offset`` was
        still waiting in a range, makes live reading and recovery both deliver it.
        """
        for at, _old, new, kind in self.resets.get(partition, []):
            if new > offset or at > before + TOLERANCE_S:
                continue
            if at >= after - TOLERANCE_S or self.zk.in_ranges(topic, partition, offset, at, at):
                return kind
        return None

    def rewound(self, partition: int, offset: int, after: float, before: float) -> tuple[float, int] | None:
        """``(time, writer pid)`` of a lowering of the partition's offset to ``offset`` or below,
        outside a reset, in between; None if there was none."""
        for at, new, pid in self.rewinds.get(partition, []):
            if new <= offset and after - TOLERANCE_S <= at <= before + TOLERANCE_S:
                return at, pid
        return None

    def reset_skipping(self, partition: int, offset: int) -> str | None:
        """The kind of a forward reset of ``partition`` that jumped over ``offset``."""
        for _at, old, new, kind in self.resets.get(partition, []):
            if old <= offset < new:
                return kind
        return None

    def lost_tail_fault(self, partition: int, offset: int, at: float) -> Fault | None:
        """The broker restart that lost ``partition``'s tail just above ``offset`` around ``at``."""
        cut = self.tails_lost.get(partition)
        if cut is None or not offset < cut:
            return None
        for f in self.faults:
            if f.kind == "broker_restart" and f.start - AFTERMATH_S <= at <= f.end + AFTERMATH_S:
                return f
        return None

    def failure_covering(self, partition: int, offset: int) -> Callback | None:
        """An injected failure whose batch held ``offset`` of ``partition``."""
        for c in self.failures:
            if c.partition == partition and c.detail.isdigit() and int(c.detail) <= offset < int(c.detail) + c.count:
                return c
        return None

    # -- which fault ------------------------------------------------------------------------------

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

    def fault_for_expiry(self, pid: int, closed: float, timeout: float) -> Fault | None:
        candidates = [
            f for f in self.faults
            if pid in f.pids and f.start - TOLERANCE_S <= closed <= f.end + timeout + AFTERMATH_S and f.kind != "processor_raise"
        ]
        return candidates[-1] if candidates else None

    def expiry_kind(self, session: Session, timeout: float) -> str:
        if session.id in self.expired_by_server:
            return "zk_restart"
        fault = self.fault_for_expiry(session.pid or -1, session.closed or 0, timeout)
        return fault.kind if fault is not None else "unscheduled session expiry"

    def _expired_by_server(self, hangs: Iterable[float], timeout: float) -> set[int]:
        """Sessions the ZooKeeper server let expire without a chance as it started after a
        ``zk_restart`` (a reconnection left hanging, a start that stalled past the session
        timeout: :func:`tests.soak.check.zookeeper_hangs`): expired within one session timeout
        (and a little) after the evidence, of a process the restart cut off; no more of them
        than pieces of evidence in that restart."""
        found: set[int] = set()
        for f in self.faults:
            if f.kind != "zk_restart":
                continue
            hung = [h for h in hangs if f.start - timeout - TOLERANCE_S <= h <= f.end + 1.0]
            expired = sorted(
                (s for s in self.zk.expiries()
                 if s.pid in f.pids and any(h <= (s.closed or 0) <= h + timeout + 1.5 for h in hung)),
                key=lambda s: s.closed or 0,
            )
            found.update(s.id for s in expired[: len(hung)])
        return found

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
