"""ResetOffset: move a group's committed offsets while its instances run, exactly once.

The nodes involved are described in :mod:`jetkafka.ops._protocol`. A reset goes like this:

1. The command process takes the topic's lock (waiting while another reset of the topic
   runs), computes the target offsets (:mod:`jetkafka.ops._targets`) and creates
   ``reset-<id>`` with status ``active``.
2. Every instance of the group watches ``commands`` (:mod:`jetkafka.ops._responder`). For each
   affected partition it holds, it pauses the partition, lets the batch in hand finish and
   commits the target in one transaction that checks its ownership, checks the command node's
   version (still active) and creates ``done/<p>``; then it resumes from the target. An
   instance that takes a partition later applies pending commands at take-over.
3. Partitions nobody holds are taken by the command process itself (the same fenced
   take-over as an instance's), committed with their marker in one transaction, and released.
4. When every partition has its marker the status becomes ``done``, in one transaction with
   the reset's entry in the offsets history (:mod:`jetkafka.ops._history`); at the timeout it
   becomes ``aborted``, which changes the node's version, so no instance can apply it
   afterwards, and then an ``incomplete`` entry lists the partitions that did move.

Targets may be absolute or relative (``--shift-by``, ``--by-duration``, ``--undo``); either
way they are computed once, in step 1 (:mod:`jetkafka.ops._plan`), and stored in the command
node, so every instance and every retry applies the same offsets. :func:`undo_reset` is a
reset like any other, whose targets are the offsets before an earlier reset, from its history
entry.

Guarantees: a partition's offset is moved by a command at most once, because the offset and
the marker are written in one transaction and the marker can be created only once; a retry
(same ``command_id``) after a crash or a timeout continues with the targets computed the first
time and skips the partitions already done. Only the current owner writes an offset, so the
fencing of every other commit stays intact. A reset started while an earlier one of the same
topic was interrupted (its process died) aborts the earlier one first, so the two never
interleave on a partition.

Failure modes: an owner that does not apply within the timeout (a batch in hand that takes
longer, an instance of a version without a responder) makes the command fail with the
partitions and owners named; the partitions done so far stay done. A killed command process
leaves its lock (and any partition it was moving) until its ZooKeeper session expires; a retry
waits for that. Finished command nodes are kept for :data:`FINISHED_TTL_S` so a late retry
still finds them; later resets delete older ones.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from jetkafka.config import JetkafkaConfig, load_config
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import zookeeper_session
from jetkafka.ops._history import HistoryEntry, add_entry, ensure_history, trim_history, who_runs_this, write_entry
from jetkafka.ops._plan import request_targets, undo_request
from jetkafka.ops._protocol import (
    ABORTED,
    ACTIVE,
    DONE,
    PartitionReset,
    ResetCommand,
    ResetError,
    ResetIncomplete,
    ResetResult,
    command_path,
    commands_path,
    error_path,
    lock_path,
    marker_data,
    marker_path,
)
from jetkafka.ops._status import BrokerView
from jetkafka.ops._targets import Target, parse_target

log = logging.getLogger(__name__)

FINISHED_TTL_S = 7 * 24 * 3600
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# One topic's part of a reset of several topics: <id>.<topic> (a topic name has up to 249 of these).
_PART_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\.[A-Za-z0-9._-]{1,249}")


# -- the command process -----------------------------------------------------------------------------


def new_command_id() -> str:
    """``<UTC time>-<random>``: sorts by creation and is unique without coordination."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


class ResetRun:
    """One run of the command process for one command; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        broker: BrokerView,
        group: str,
        topic: str,
        target: Target,
        partitions: tuple[int, ...] | None,
        timeout: float,
        command_id: str,
        on_partition_moved: Callable[[int, int], None] | None = None,
        before: dict[int, int] | None = None,
        repeat_id: str | None = None,
    ) -> None:
        self.client = client
        self.broker = broker
        self.paths = GroupPaths(group)
        self.topic = topic
        self.target = target
        self.partitions = partitions
        self.timeout = timeout
        self.id = command_id
        # What to repeat the command with to continue it: a part of a reset of several topics
        # is continued by repeating the whole command, with its id.
        self.repeat_id = repeat_id or command_id
        self.path = command_path(self.paths, command_id)
        self.owner_id = f"reset-{command_id}"
        self.by = f"{who_runs_this()} pid {os.getpid()}"
        self.before = before  # undo: the offsets to return to
        self._ownership = PartitionOwnership(client, self.paths, self.owner_id)
        self._store = OffsetStore(client, self.paths)
        self._wake = threading.Event()
        self._on_moved = on_partition_moved
        self._lock_owner: int | None = None  # the session that created our lock node

    def run(self) -> ResetResult:
        deadline = time.monotonic() + self.timeout
        self.client.ensure_path(commands_path(self.paths))
        self._purge_finished()
        self._lock(deadline)
        try:
            existing = self._existing()
            if existing is not None and existing[0].status == DONE:
                return self._result(existing[0], {}, True, ())
            # Before ours exists: two active resets of one topic could interleave on a partition.
            superseded = self._supersede_interrupted()
            if existing is None:
                command, version, resumed = self._create(), 0, False
            else:
                (command, version), resumed = self._resume(*existing), True
            pending = self._drive(command, version, deadline)
            if pending:
                self.client.set(self.path, command.with_status(ABORTED).to_json())
                # Markers read after the abort are final: any later transaction fails its check.
                done = self._markers()
                reasons = self._explain([p for p in pending if p not in done])
                result = self._result(command, reasons, resumed, superseded)
                if result.applied:
                    write_entry(self.client, self.paths, self._entry(command, result, "incomplete"))
                raise ResetIncomplete(self._failure_message(result), result)
            result = self._result(command, {}, resumed, superseded)
            self._finish(command, version, result)
            log.info("reset %s of %s done: %d partitions moved", self.id, self.topic, len(result.applied))
            return result
        finally:
            self._unlock()

    # -- lock, create, resume ------------------------------------------------------------------

    def _lock(self, deadline: float) -> None:
        path = lock_path(self.paths, self.topic)
        data = json.dumps({"id": self.id, "by": self.by}).encode()
        announced = False
        while True:
            try:
                # The created node's own stat: the session that holds the lock, whatever
                # kazoo's session is by the time it is released.
                _, stat = self.client.create(path, data, ephemeral=True, include_data=True)
                self._lock_owner = stat.owner_session_id
                return
            except NodeExistsError:
                pass
            gone = threading.Event()
            try:
                # The watch sets this attempt's Event, whatever the loop has done since.
                holder, _ = self.client.get(path, watch=lambda _e, gone=gone: gone.set())
            except NoNodeError:
                continue
            info = json.loads(holder or b"{}")
            if not announced:
                log.warning(
                    "waiting for reset %s of %s (%s) to finish; a killed run holds the topic until its "
                    "ZooKeeper session expires",
                    info.get("id"),
                    self.topic,
                    info.get("by"),
                )
                announced = True
            if not gone.wait(max(0.0, deadline - time.monotonic())):
                raise ResetError(
                    f"reset {info.get('id')} of topic {self.topic} is running ({info.get('by')}), or was killed "
                    "less than zookeeper.session_timeout_s ago; wait for it and retry"
                )

    def _finish(self, command: ResetCommand, version: int, result: ResetResult) -> None:
        """Status ``done`` and the history entry, in one transaction (see _history)."""
        ensure_history(self.client, self.paths)
        tx = self.client.transaction()
        tx.set_data(self.path, command.with_status(DONE).to_json(), version)
        add_entry(tx, self.paths, self._entry(command, result, DONE))
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            # Every partition is moved (markers are final), but the command changed under us.
            raise ResetError(
                f"reset {self.id}: every partition moved, but the command was changed by another process "
                f"before it was marked done ({results}); repeat it with --id {self.repeat_id} to record it"
            )
        trim_history(self.client, self.paths)

    def _entry(self, command: ResetCommand, result: ResetResult, status: str) -> HistoryEntry:
        target = Target.from_spec(command.to)
        return HistoryEntry(
            command_id=self.id,
            topic=self.topic,
            to=target.describe(),
            status=status,
            partitions=dict(result.applied),
            kind="undo" if target.kind == "undo" else "reset",
            undoes=target.ref if target.kind == "undo" else None,
        )

    def _unlock(self) -> None:
        path = lock_path(self.paths, self.topic)
        try:
            # Only our own node: after our session expired the lock may be another reset's.
            stat = self.client.exists(path)
            if stat is not None and stat.owner_session_id == self._lock_owner:
                self.client.delete(path, version=stat.version)
        except Exception:  # its ephemeral node goes with the session anyway
            log.debug("lock of %s not deleted", self.topic, exc_info=True)

    def _commands(self) -> dict[str, tuple[ResetCommand, int]]:
        out = {}
        for name in self.client.get_children(commands_path(self.paths)):
            if not name.startswith("reset-"):
                continue
            try:
                data, stat = self.client.get(f"{commands_path(self.paths)}/{name}")
                out[name] = (ResetCommand.from_json(data), stat.version)
            except (NoNodeError, ValueError, KeyError):
                continue
        return out

    def _supersede_interrupted(self) -> tuple[str, ...]:
        aborted = []
        for name, (command, version) in sorted(self._commands().items()):
            if command.id == self.id or command.topic != self.topic or command.status != ACTIVE:
                continue
            # We hold the topic's lock, so its command process is gone: stop it for good.
            try:
                self.client.set(f"{commands_path(self.paths)}/{name}", command.with_status(ABORTED).to_json(), version)
            except (BadVersionError, NoNodeError):
                continue
            log.warning("aborted the interrupted reset %s of %s; the partitions it moved stay moved", command.id, self.topic)
            aborted.append(command.id)
        return tuple(aborted)

    def _existing(self) -> tuple[ResetCommand, int] | None:
        """This id's command and its node version, if it exists; it must match the request."""
        try:
            data, stat = self.client.get(self.path)
        except NoNodeError:
            return None
        command = ResetCommand.from_json(data)
        if (command.topic, command.to, command.partitions) != (self.topic, self.target.spec, self.partitions):
            raise ResetError(
                f"command id {self.id} already names a reset of {command.topic} to "
                f"{Target.from_spec(command.to).describe()} "
                f"(partitions {list(command.partitions) if command.partitions is not None else 'all'}); "
                "repeat exactly those arguments to continue it, or use another --id"
            )
        return command, stat.version

    def _create(self) -> ResetCommand:
        counts = self.broker.partition_counts([self.topic])
        wanted = self._partitions(counts[self.topic])
        plan = request_targets(self.client, self.broker, self.paths, self.topic, wanted, self.target, self.before)
        command = ResetCommand(
            id=self.id,
            topic=self.topic,
            to=self.target.spec,
            partitions=self.partitions,
            targets=plan.targets,
            by=self.by,
            timeout_s=self.timeout,
            notes=plan.notes,
        )
        self._ownership.prepare(self.topic)
        tx = self.client.transaction()
        tx.create(self.path, command.to_json())
        tx.create(f"{self.path}/done")
        tx.create(f"{self.path}/errors")
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise ResetError(f"command {self.id} could not be created: {results}")
        log.info(
            "reset %s of %s to %s: targets %s",
            self.id,
            self.topic,
            self.target.describe(),
            ", ".join(f"{p}:{o}" for p, o in sorted(command.targets.items())),
        )
        return command

    def _resume(self, command: ResetCommand, version: int) -> tuple[ResetCommand, int]:
        if command.status == ABORTED:
            # Reports of the earlier run would be mistaken for this one's.
            for child in self.client.get_children(f"{self.path}/errors"):
                self.client.delete(f"{self.path}/errors/{child}")
            command = command.with_status(ACTIVE)
            version = self.client.set(self.path, command.to_json(), version).version
        log.info("continuing reset %s of %s", self.id, self.topic)
        return command, version

    def _partitions(self, count: int) -> list[int]:
        if self.partitions is None:
            return list(range(count))
        missing = sorted(p for p in self.partitions if not 0 <= p < count)
        if missing:
            raise ResetError(
                f"topic {self.topic} has {count} partitions (0..{count - 1}); --partitions names {missing}"
            )
        return sorted(set(self.partitions))

    # -- waiting, and taking what nobody holds -------------------------------------------------------

    def _drive(self, command: ResetCommand, version: int, deadline: float) -> list[int]:
        """Wait for every marker, applying unheld partitions here; the partitions still pending."""
        done_path = f"{self.path}/done"
        wake = self._wake

        def on_change(_event: Any) -> None:
            wake.set()

        while True:
            wake.clear()
            done = {int(c) for c in self.client.get_children(done_path, watch=on_change) if c.isdigit()}
            pending = sorted(p for p in command.targets if p not in done)
            if not pending or time.monotonic() >= deadline:
                return pending
            owners = self._ownership.owners(self.topic)
            self.client.get_children(self.paths.owners(self.topic), watch=on_change)
            for p in pending:
                if p not in owners and self._apply_unheld(command, version, p) and self._on_moved is not None:
                    self._on_moved(p, command.targets[p])
            wake.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    def _apply_unheld(self, command: ResetCommand, version: int, p: int) -> bool:
        lease = self._ownership.take(self.topic, p)
        if lease is None:
            return False  # an instance took it: it applies the command at take-over
        try:
            marker = marker_path(self.paths, self.id, p)
            if self.client.exists(marker):
                return False
            target = command.targets[p]
            data = marker_data(lease.committed, target, self.owner_id)

            def extra(tx: TransactionRequest) -> None:
                tx.check(self.path, version)
                tx.create(marker, data)

            try:
                self._store.commit_many({(self.topic, p): (lease, target)}, extra)
            except NodeExistsError:
                return False
            except CommitUncertain as exc:
                # The marker tells later whether it landed; the next round looks again.
                log.warning("%s[%d]: reset %s not confirmed, ZooKeeper unreachable: %s", self.topic, p, self.id, exc)
                return False
            except (BadVersionError, NoNodeError):
                raise ResetError(f"command {self.id} was changed by another process while it ran; retry it") from None
            log.info("%s[%d]: offset %s -> %d (reset %s, partition held by no instance)", self.topic, p, lease.committed, target, self.id)
            return True
        finally:
            self._ownership.release(lease)

    # -- results -------------------------------------------------------------------------------------

    def _markers(self) -> dict[int, PartitionReset]:
        out = {}
        done_path = f"{self.path}/done"
        for child in self.client.get_children(done_path):
            if not child.isdigit():
                continue
            try:
                d = json.loads(self.client.get(f"{done_path}/{child}")[0])
            except (NoNodeError, ValueError):
                continue
            out[int(child)] = PartitionReset(int(child), d.get("old"), int(d["new"]), str(d.get("by", "")))
        return out

    def _explain(self, pending: list[int]) -> dict[int, str]:
        from jetkafka.coordination._registry import ConsumerRegistry

        owners = self._ownership.owners(self.topic)
        live = ConsumerRegistry(self.client, self.paths).live()
        out = {}
        for p in pending:
            owner = owners.get(p)
            if owner is None:
                why = "held by no instance, and could not be taken (taken and released in between)"
            elif owner in live:
                info = live[owner]
                why = f"owner {owner} ({info.host} pid {info.pid}) did not apply it within {self.timeout:g} s"
            else:
                why = (
                    f"owned by {owner}, which is not a live instance (a process whose ZooKeeper session "
                    "has not expired yet)"
                )
            try:
                reported = self.client.get(error_path(self.paths, self.id, p))[0].decode()
                why += f"; it reported: {reported}"
            except NoNodeError:
                pass
            out[p] = why
        return out

    def _result(
        self, command: ResetCommand, pending: dict[int, str], resumed: bool, superseded: tuple[str, ...]
    ) -> ResetResult:
        return ResetResult(
            command_id=self.id,
            topic=self.topic,
            to=Target.from_spec(command.to).describe(),
            targets=dict(command.targets),
            applied=self._markers(),
            pending=pending,
            resumed=resumed,
            superseded=superseded,
            notes=dict(command.notes),
        )

    def _failure_message(self, result: ResetResult) -> str:
        lines = [
            (
                f"reset {self.id} of {self.topic} incomplete after {self.timeout:g} s: "
                f"{len(result.applied)} of {len(result.targets)} partitions moved, the command is aborted"
            )
        ]
        lines += [f"  {self.topic}[{p}]: {why}" for p, why in sorted(result.pending.items())]
        lines.append(
            f"  fix: repeat the same command with --id {self.repeat_id} to finish it (done partitions are skipped)"
        )
        return "\n".join(lines)

    # -- housekeeping --------------------------------------------------------------------------------

    def _purge_finished(self) -> None:
        now = time.time()
        for name, (command, _) in self._commands().items():
            if command.status != ACTIVE and command.finished is not None and now - command.finished > FINISHED_TTL_S:
                try:
                    self.client.delete(f"{commands_path(self.paths)}/{name}", recursive=True)
                    log.info("deleted reset %s, finished more than %d days ago", command.id, FINISHED_TTL_S // 86400)
                except NoNodeError:
                    pass


def reset_offsets(
    config: JetkafkaConfig | str | os.PathLike[str],
    topic: str,
    to: str | int | dt.datetime | Target,
    partitions: Iterable[int] | None = None,
    timeout: float = 60.0,
    command_id: str | None = None,
    on_partition_moved: Callable[[int, int], None] | None = None,
    repeat_id: str | None = None,
) -> ResetResult:
    """Move the committed offsets of ``topic`` in the group of ``config``, safely while it runs.

    ``to``: ``"earliest"``, ``"latest"``, an offset, a time (ISO-8601 string or datetime), or a
    :class:`~jetkafka.ops._targets.Target` (``Target("shift", -100)``, ``Target("duration", ms)``).
    Relative targets are computed once, when the command is created.
    Returns when every partition was moved; raises :class:`ResetIncomplete` (with the partial
    result) when some were not within ``timeout`` seconds, and :class:`ResetError` when the
    request is invalid. Pass the same ``command_id`` again to continue an interrupted reset.
    ``on_partition_moved(partition, offset)`` runs on the calling thread each time the command
    moves a partition no instance holds itself (instances report theirs in the result), e.g.
    to show progress; what it raises ends the command where it is, to be continued by id.
    ``repeat_id`` is the id messages tell to repeat the command with (default ``command_id``;
    a part of a reset of several topics, ``<id>.<topic>``, is continued with ``<id>``).
    """
    if not isinstance(config, JetkafkaConfig):
        config = load_config(config)
    check_command_id(command_id)
    target = parse_target(to)
    if target.kind == "undo":
        raise ResetError("use undo_reset to undo a reset")
    wanted = tuple(sorted(set(partitions))) if partitions is not None else None
    group = config.channel.group
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, group) as broker:
        broker.partition_counts([topic])  # a missing topic fails before anything is written
        run = ResetRun(
            client,
            broker,
            group,
            topic,
            target,
            wanted,
            timeout,
            command_id or new_command_id(),
            on_partition_moved,
            repeat_id=repeat_id,
        )
        return run.run()


def undo_reset(
    config: JetkafkaConfig | str | os.PathLike[str],
    reset_id: str,
    partitions: Iterable[int] | None = None,
    timeout: float = 60.0,
    command_id: str | None = None,
    on_partition_moved: Callable[[int, int], None] | None = None,
    repeat_id: str | None = None,
) -> ResetResult:
    """Move the partitions reset ``reset_id`` moved back to their offsets before it.

    A reset like :func:`reset_offsets` (same exactly-once protocol, fencing, retry by
    ``command_id``, and its own history entry), whose targets are the ``old`` offsets of the
    newest history entry of ``reset_id``, clamped to the logs as they are now. ``partitions``
    limits it to some of them; ``repeat_id`` as for :func:`reset_offsets`.
    """
    if not isinstance(config, JetkafkaConfig):
        config = load_config(config)
    check_command_id(command_id)
    group = config.channel.group
    paths = GroupPaths(group)
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, group) as broker:
        topic, wanted, before = undo_request(client, paths, reset_id, partitions)
        run = ResetRun(
            client,
            broker,
            group,
            topic,
            Target("undo", ref=reset_id),
            wanted,
            timeout,
            command_id or new_command_id(),
            on_partition_moved,
            before,
            repeat_id,
        )
        return run.run()


def check_command_id(command_id: str | None) -> None:
    """:class:`ResetError` for an id a command cannot have (a node name of ZooKeeper, readable)."""
    if command_id is not None and not (_ID.fullmatch(command_id) or _PART_ID.fullmatch(command_id)):
        raise ResetError(f"command id {command_id!r} is invalid; use 1 to 64 letters, digits, '.', '_' or '-'")


__all__ = [
    "FINISHED_TTL_S",
    "PartitionReset",
    "ResetError",
    "ResetIncomplete",
    "ResetResult",
    "ResetRun",
    "check_command_id",
    "new_command_id",
    "reset_offsets",
    "undo_reset",
]
