"""What ZooKeeper accepted during a soak, rebuilt from its transaction log, and the fence checked.

The soak does not take jetkafka's word that its commits are fenced: after the run it replays
the server's transaction log (:mod:`tests.support.zk_txnlog`) and rebuilds, zxid by zxid, who
owned each partition (the session that created ``/…/owners/<topic>/<p>``, until that node is
deleted or its session closes) and every write of ``/…/offsets/<topic>/<p>``. Then:

* a **foreign commit** is a write of a partition's offset by a session that did not own the
  partition at that zxid (operations within one multi are applied in order, so a take-over's
  own write, made right after creating the owner node, is the owner's);
* an offset that **went back** is a write that lowered a partition's offset without creating
  an offset reset's ``done`` marker in the same transaction (the only sanctioned rewind).

It also tells which process a session belonged to (the ``pid`` in the registration the session
wrote under ``/…/ids``), when each session ended and whether the server expired it (a close
with request number 0 comes from the server's session tracker, not from the client), each
hold's fencing token (the offset node's version after the take, counted as ZooKeeper counts
it), the committed offset of any partition at any time, its recovery ranges (the ``ranges``
of ``/…/recovery/<topic>/<p>``) at any time, and each pause marker's life: what the soak
checker needs to tell a crash's re-deliveries from a violation, to place a dispatcher's
request by the token it carried, and to know when a pause ended.

Times are the server's wall clock (milliseconds), the same clock as the processes' on one
machine. Only failed multi-operations are skipped: they changed nothing.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tests.support.zk_txnlog import Op, Txn

_NODE = re.compile(r"/consumers/(?P<group>[^/]+)/(?P<kind>owners|offsets)/(?P<topic>[^/]+)/(?P<p>\d+)$")
_IDS = re.compile(r"/consumers/(?P<group>[^/]+)/ids/(?P<cid>[^/]+)$")
_RESET_NODE = re.compile(r"/consumers/(?P<group>[^/]+)/commands/reset-(?P<id>[^/]+)$")
_RESET_DONE = re.compile(r"/consumers/(?P<group>[^/]+)/commands/reset-(?P<id>[^/]+)/done/(?P<p>\d+)$")
_RESET_LOCK = re.compile(r"/consumers/(?P<group>[^/]+)/commands/lock-[^/]+$")
_RECOVERY = re.compile(r"/consumers/(?P<group>[^/]+)/recovery/(?P<topic>[^/]+)/(?P<p>\d+)$")
_PAUSE = re.compile(r"/consumers/(?P<group>[^/]+)/control/paused/(?P<who>[^/]+)$")

Key = tuple[str, int]


@dataclass
class Session:
    """One ZooKeeper session seen in the log."""

    id: int
    opened: float | None = None
    closed: float | None = None
    expired: bool = False  # closed by the server's session tracker (timeout), not by the client
    pid: int | None = None
    consumer_id: str | None = None
    role: str = "other"  # "member" (registered under ids), "reset" (an offsets reset command)

    def label(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else self.role
        return f"0x{self.id:x} ({who})"


@dataclass(frozen=True)
class OffsetWrite:
    """A write of a partition's offset node that the server applied."""

    zxid: int
    time: float
    session: int
    topic: str
    partition: int
    offset: int | None
    previous: int | None
    owner: int | None  # the session owning the partition at that zxid, None if nobody did
    reset_id: str | None  # the reset whose done marker the same transaction created
    # ``ordering: key | none``: the offsets finished above ``offset`` the same write claims,
    # as (first, end) runs, end exclusive (the node's second line).
    finished: tuple[tuple[int, int], ...] = ()

    @property
    def foreign(self) -> bool:
        return self.owner != self.session

    @property
    def went_back(self) -> bool:
        return (
            self.reset_id is None
            and self.offset is not None
            and self.previous is not None
            and self.offset < self.previous
        )


@dataclass(frozen=True)
class Hold:
    """One owner node's life: a session holding a partition from ``start`` to ``end``."""

    topic: str
    partition: int
    session: int
    owner_id: str
    start: float
    start_zxid: int
    end: float | None = None
    how: str = ""  # "released" (node deleted), "session closed", "session expired", "" = held at the end
    # The offset node's version right after the take: the hold's fencing token (what jetkafka
    # hands to processors as ``fencing_token``, and the dispatcher sends as ``jetkafkaepoch``).
    epoch: int = 0


@dataclass(frozen=True)
class PauseMarker:
    """A pause marker's life: ``who`` is a consumer id, or ``_all`` for the whole group."""

    who: str
    created: float
    removed: float | None


@dataclass
class ZooKeeperHistory:
    group: str
    sessions: dict[int, Session] = field(default_factory=dict)
    writes: list[OffsetWrite] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    resets: dict[str, dict] = field(default_factory=dict)  # reset id -> the command as created
    pauses: list[PauseMarker] = field(default_factory=list)
    transactions: int = 0
    _by_key: dict[Key, tuple[list[float], list[int | None]]] = field(default_factory=dict, repr=False)
    # Beside ``_by_key``, one entry per write: the finished runs that write claimed.
    _maps: dict[Key, list[tuple[tuple[int, int], ...]]] = field(default_factory=dict, repr=False)
    # Each partition's recovery ranges over time: (times, ranges as of each time).
    _ranges: dict[Key, tuple[list[float], list[tuple[tuple[int, int], ...]]]] = field(default_factory=dict, repr=False)

    @property
    def foreign_writes(self) -> list[OffsetWrite]:
        return [w for w in self.writes if w.foreign]

    @property
    def backward_writes(self) -> list[OffsetWrite]:
        return [w for w in self.writes if w.went_back]

    def committed_at(self, topic: str, partition: int, at: float) -> int | None:
        """The partition's committed offset as of wall time ``at`` (None: nothing yet)."""
        times, values = self._by_key.get((topic, partition), ([], []))
        i = bisect.bisect_right(times, at)
        return values[i - 1] if i else None

    def finished_at(self, topic: str, partition: int, at: float) -> tuple[tuple[int, int], ...]:
        """The offsets finished above the committed one as of wall time ``at`` (runs, end exclusive)."""
        times, _values = self._by_key.get((topic, partition), ([], []))
        i = bisect.bisect_right(times, at)
        maps = self._maps.get((topic, partition), [])
        return maps[i - 1] if 0 < i <= len(maps) else ()

    def ranges_at(self, topic: str, partition: int, at: float) -> tuple[tuple[int, int], ...]:
        """The partition's recovery ranges (half-open ``[from, to)``) as of wall time ``at``."""
        times, values = self._ranges.get((topic, partition), ([], []))
        i = bisect.bisect_right(times, at)
        return values[i - 1] if i else ()

    def in_ranges(self, topic: str, partition: int, offset: int, start: float, end: float) -> bool:
        """Whether ``offset`` was in the partition's recovery ranges at some time in ``[start, end]``."""
        times, values = self._ranges.get((topic, partition), ([], []))
        first = max(0, bisect.bisect_right(times, start) - 1)
        last = bisect.bisect_right(times, end)
        return any(lo <= offset < hi for ranges in values[first:last] for lo, hi in ranges)

    def hold_by_epoch(self, topic: str, partition: int, epoch: int) -> Hold | None:
        """The hold of the partition whose fencing token is ``epoch``."""
        return next((h for h in self.holds if (h.topic, h.partition, h.epoch) == (topic, partition, epoch)), None)

    def sessions_of(self, pid: int) -> list[Session]:
        return [s for s in self.sessions.values() if s.pid == pid]

    def expiries(self) -> list[Session]:
        """Member sessions the server expired, oldest first."""
        return sorted((s for s in self.sessions.values() if s.expired and s.role == "member"), key=lambda s: s.closed or 0)

    def holds_of(self, pid: int, topic: str, partition: int) -> list[Hold]:
        sessions = {s.id for s in self.sessions_of(pid)}
        return [h for h in self.holds if h.session in sessions and (h.topic, h.partition) == (topic, partition)]


def _offset(data: bytes) -> int | None:
    # The first line: under ``ordering: key | none`` a second one lists the finished offsets.
    text = data.decode("ascii", "replace").strip().split("\n", 1)[0].strip()
    return int(text) if text.lstrip("-").isdigit() else None


def finished_runs(data: bytes) -> tuple[tuple[int, int], ...]:
    """The finished runs an offset node's second line claims (``gap+length`` from the previous
    run's end, the first from the offset); none for a bare offset or a line that cannot be read.
    Decoded here, not with jetkafka's own decoder: the checker does not take its word."""
    lines = data.decode("ascii", "replace").strip().split("\n")
    offset = _offset(data)
    if len(lines) < 2 or offset is None:
        return ()
    runs, end = [], offset
    try:
        for part in lines[1].strip().split(","):
            gap, length = part.split("+")
            first = end + int(gap)
            end = first + int(length)
            runs.append((first, end))
    except ValueError:
        return ()
    return tuple(runs)


class _Replay:
    """Applies transactions in zxid order, keeping owners, offsets and open holds."""

    def __init__(self, group: str) -> None:
        self.history = ZooKeeperHistory(group)
        self.owners: dict[Key, Hold] = {}
        self.offsets: dict[Key, int | None] = {}
        self.versions: dict[Key, int] = {}  # each offset node's version, as ZooKeeper counts it
        self.markers: dict[str, float] = {}  # pause markers in place: who -> created

    def session(self, sid: int) -> Session:
        return self.history.sessions.setdefault(sid, Session(sid))

    def end_hold(self, key: Key, at: float, how: str) -> None:
        hold = self.owners.pop(key, None)
        if hold is not None:
            self.history.holds.append(
                Hold(hold.topic, hold.partition, hold.session, hold.owner_id, hold.start, hold.start_zxid, at, how, hold.epoch)
            )

    def apply(self, txn: Txn) -> None:
        self.history.transactions += 1
        at = txn.time
        if txn.kind == "createSession":
            self.session(txn.session).opened = at
            return
        if txn.kind == "closeSession":
            session = self.session(txn.session)
            session.closed, session.expired = at, txn.cxid == 0
            how = "session expired" if session.expired else "session closed"
            for key in [k for k, h in self.owners.items() if h.session == txn.session]:
                self.end_hold(key, at, how)
            return
        if txn.failed:
            return
        markers = {}
        for op in txn.ops:
            m = _RESET_DONE.search(op.path) if op.kind == "create" else None
            if m and m["group"] == self.history.group:
                markers[int(m["p"])] = m["id"]
        for op in txn.ops:
            self.apply_op(txn, op, markers)

    def _mark_reset(self, sid: int) -> None:
        session = self.session(sid)
        if session.role == "other":  # a registered member stays a member
            session.role = "reset"

    def apply_op(self, txn: Txn, op: Op, markers: dict[int, str]) -> None:
        group, at = self.history.group, txn.time
        if op.kind == "create":
            ids = _IDS.search(op.path)
            if ids and ids["group"] == group:
                session = self.session(txn.session)
                session.role, session.consumer_id = "member", ids["cid"]
                try:
                    session.pid = int(json.loads(op.data)["pid"])
                except (ValueError, KeyError, TypeError):
                    pass
                return
            reset = _RESET_NODE.search(op.path)
            if reset and reset["group"] == group:
                try:
                    self.history.resets[reset["id"]] = json.loads(op.data)
                except ValueError:
                    self.history.resets[reset["id"]] = {}
                self._mark_reset(txn.session)
                return
            lock = _RESET_LOCK.search(op.path)
            if lock and lock["group"] == group:
                self._mark_reset(txn.session)
                return
        pause = _PAUSE.search(op.path)
        if pause and pause["group"] == group:
            if op.kind == "create":
                self.markers[pause["who"]] = at
            elif op.kind == "delete" and pause["who"] in self.markers:
                self.history.pauses.append(PauseMarker(pause["who"], self.markers.pop(pause["who"]), at))
            return
        recovery = _RECOVERY.search(op.path)
        if recovery and recovery["group"] == group:
            self.apply_ranges(at, (recovery["topic"], int(recovery["p"])), op)
            return
        node = _NODE.search(op.path)
        if not node or node["group"] != group:
            return
        key = (node["topic"], int(node["p"]))
        if node["kind"] == "owners":
            if op.kind == "create":
                self.end_hold(key, at, "released")  # cannot exist twice; kept defensive
                self.owners[key] = Hold(key[0], key[1], txn.session, op.data.decode("utf-8", "replace"), at, txn.zxid)
            elif op.kind == "delete":
                self.end_hold(key, at, "released")
            return
        if op.kind not in ("setData", "create"):
            return
        self.versions[key] = 0 if op.kind == "create" else self.versions.get(key, 0) + 1
        owner = self.owners.get(key)
        if owner is not None and owner.start_zxid == txn.zxid and owner.session == txn.session:
            # The take's own write, in the transaction that created the owner node: its version
            # is the hold's fencing token.
            self.owners[key] = replace(owner, epoch=self.versions[key])
        value = _offset(op.data)
        if op.kind == "create" and value is None:
            self.offsets.setdefault(key, None)
            return  # an empty offset node: nothing committed
        previous = self.offsets.get(key)
        write = OffsetWrite(
            txn.zxid, at, txn.session, key[0], key[1], value, previous,
            owner.session if owner is not None else None, markers.get(key[1]), finished_runs(op.data),
        )
        self.history.writes.append(write)
        self.offsets[key] = value
        times, values = self.history._by_key.setdefault(key, ([], []))
        times.append(at)
        values.append(value)
        self.history._maps.setdefault(key, []).append(write.finished)

    def apply_ranges(self, at: float, key: Key, op: Op) -> None:
        """A write of a partition's recovery node: its ``ranges`` from now on (none once deleted)."""
        if op.kind == "delete":
            ranges: tuple[tuple[int, int], ...] = ()
        elif op.kind in ("create", "setData"):
            try:
                ranges = tuple((int(lo), int(hi)) for lo, hi in json.loads(op.data)["ranges"])
            except (ValueError, KeyError, TypeError):
                return  # not a recovery record jetkafka wrote: leave the history as it was
        else:
            return
        times, values = self.history._ranges.setdefault(key, ([], []))
        times.append(at)
        values.append(ranges)


def replay(txns: Iterable[Txn], group: str) -> ZooKeeperHistory:
    """The group's ownership and offset history from transactions in zxid order."""
    state = _Replay(group)
    for txn in txns:
        state.apply(txn)
    state.history.holds.extend(state.owners.values())  # still held when the log ends
    state.history.pauses.extend(PauseMarker(who, at, None) for who, at in state.markers.items())
    return state.history
