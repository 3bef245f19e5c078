"""The instance side of ResetOffset: apply the group's reset commands to the partitions held here.

Every channel runs one :class:`CommandResponder`, started before the channel joins its group
(:class:`ResponderAddOn`, one of the standard add-ons of :mod:`jetkafka._assembly`).
It reacts to three things: a command node appearing or changing (a watch on
``/consumers/<group>/commands`` and one on each ``reset-<id>`` node), and partitions taken by
the channel (:meth:`CommandResponder.partitions_taken`), so a partition that changes hands
while a command runs is applied by whichever instance holds it.

For each active command and each of its partitions held here without a ``done`` marker, it
files a move on the partition (:meth:`RunningChannel.file_move`): the partition's next turn,
after the batch in hand, runs one transaction that checks the lease, writes the target offset,
checks that the command node is still at the version read (still active) and creates the
marker; the partition goes on from the target. A transaction that loses a race (marker already
there, command aborted, partition lost) changes nothing. For partitions just taken, the moves
of the commands already known are filed before the partitions' first turn, so nothing is
processed from the old offset first.

Failure modes: a batch in hand that does not finish within the command's ``timeout_s`` (or
ZooKeeper trouble) is reported under ``reset-<id>/errors/<p>`` and retried every second while
the command stays active. Work runs on the responder's own thread: watch callbacks and the
rebalance thread only queue it. The watches (:mod:`jetkafka.coordination._watches`) read the
command nodes again after every new connection or session, so a command issued while this
instance was disconnected or its session expired is still seen.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from jetkafka._tracing._spans import operation_span, partition_attributes
from jetkafka.channel._add_ons import ChannelAddOn
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._watches import ChildrenWatch, NodeWatch
from jetkafka.errors import CommitFenced
from jetkafka.events import Key
from jetkafka.ops._protocol import ACTIVE, ResetCommand, commands_path, error_path, marker_data, marker_path

if TYPE_CHECKING:
    from jetkafka.channel._moves import Move
    from jetkafka.channel._running import RunningChannel
    from jetkafka.processors._base import BatchEventProcessor

log = logging.getLogger(__name__)

Job = tuple[str, object]  # ("command", node name), ("moves", filed moves) or ("partitions", (keys, filed))

RETRY_S = 1.0
MAX_PARALLEL = 16  # partitions of one command moved at once by one channel


class CommandResponder:
    def __init__(self, channel: RunningChannel, client: KazooClient) -> None:
        self._channel = channel
        self._client = client
        self._paths = GroupPaths(channel.config.channel.group)
        self._root = commands_path(self._paths)
        self._topics = set(channel.config.channel.topics)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._watched: dict[str, NodeWatch] = {}
        self._known: dict[str, tuple[ResetCommand, int]] = {}  # active commands as the watches saw them
        self._commands_watch: ChildrenWatch | None = None
        self._lock = threading.Lock()
        self._active = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._client.ensure_path(self._root)
        self._active = True
        self._thread = threading.Thread(target=self._run, name="jetkafka-commands", daemon=True)
        self._thread.start()
        self._commands_watch = ChildrenWatch(self._client, self._root, self._on_children).start()

    def stop(self, timeout: float = 5.0) -> None:
        self._active = False
        if self._commands_watch is not None:
            self._commands_watch.stop()
        with self._lock:
            watches = list(self._watched.values())
            self._watched.clear()
        for watch in watches:
            watch.stop()
        self._jobs.put(None)
        if self._thread is not None:
            # A reposition in progress may wait for a batch; the channel is stopping anyway.
            self._thread.join(timeout)
            self._thread = None

    def partitions_taken(self, keys: list[Key]) -> None:
        """Apply pending commands to partitions just taken (on the rebalance thread, before
        their first turn).

        The moves of the active commands this instance knows of are filed at once, so each
        partition's first turn applies its reset and no batch runs from the old offset; the
        responder thread waits for them. Commands not seen here yet are looked up on the
        responder thread, as for any command.
        """
        keys = [k for k in keys if k[0] in self._topics]
        if not self._active or not keys:
            return
        with self._lock:
            known = sorted(self._known.items(), key=lambda item: item[1][0].created)
        filed: list[tuple[str, ResetCommand, Key, Move]] = []
        for name, (command, version) in known:  # oldest first: the newer command's move runs last
            for key in keys:
                if key[0] == command.topic and key[1] in command.targets:
                    try:
                        filed.append((name, command, key, self._file(command, version, *key)))
                    except CommitFenced:
                        continue  # given up again already
        if filed:
            self._jobs.put(("moves", tuple(filed)))
        self._jobs.put(("partitions", (tuple(keys), frozenset((c.id, k) for _, c, k, _ in filed))))

    # -- watches (kazoo's thread: queue work, never block) -----------------------------------------

    def _on_children(self, children: list[str]) -> None:
        if not self._active:
            return
        for name in sorted(children):
            if not name.startswith("reset-"):
                continue
            with self._lock:
                if name in self._watched:
                    continue
                watch = self._watched[name] = NodeWatch(self._client, f"{self._root}/{name}", self._data_watcher(name))
            watch.start()

    def _data_watcher(self, name: str) -> Callable[[bytes | None, ZnodeStat | None], None]:
        # The node's name must not sit in a defaulted parameter.
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._on_data(name, data, stat)

        return on_data

    def _on_data(self, name: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None or stat is None or not self._active:
            with self._lock:
                watch = self._watched.pop(name, None)
                self._known.pop(name, None)
            if watch is not None:
                watch.stop()
            return
        # What take-overs file at once; the responder thread reads the node again before acting.
        command = self._parse(name, data)
        with self._lock:
            if command is not None and command.status == ACTIVE and command.topic in self._topics:
                self._known[name] = (command, stat.version)
            else:
                self._known.pop(name, None)
        self._jobs.put(("command", name))

    # -- the responder thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None or not self._active:
                return
            try:
                self._handle(job)
            except Exception:
                log.exception("handling %s failed; retrying in %g s", job, RETRY_S)
                self._retry(job)

    def _retry(self, job: Job) -> None:
        timer = threading.Timer(RETRY_S, self._requeue, args=(job,))
        timer.name = "jetkafka-commands-retry"
        timer.daemon = True
        timer.start()

    def _requeue(self, job: Job) -> None:
        # On the retry timer's thread: a responder stopped meanwhile takes no more jobs.
        if self._active:
            self._jobs.put(job)

    def _handle(self, job: Job) -> None:
        kind, arg = job
        if kind == "command":
            assert isinstance(arg, str)
            loaded = self._load(arg)
            if loaded is not None:
                command, version = loaded
                held = set(self._channel.owned_partitions())
                keys = [(command.topic, p) for p in sorted(command.targets) if (command.topic, p) in held]
                self._apply_all(arg, command, version, keys)
            return
        if kind == "moves":
            assert isinstance(arg, tuple)
            retry = {name for name, command, (topic, p), move in arg if not self._settled(command, topic, p, move)}
            for name in sorted(retry):
                self._retry(("command", name))
            return
        assert isinstance(arg, tuple)
        taken, filed = arg
        try:
            names = self._client.get_children(self._root)
        except NoNodeError:
            return
        loaded_all = [(n, self._load(n)) for n in names if n.startswith("reset-")]
        # Oldest first: should two commands ever cover one partition, the newer one wins.
        for name, loaded in sorted(
            ((n, c) for n, c in loaded_all if c is not None), key=lambda item: item[1][0].created
        ):
            command, version = loaded
            keys = [
                k for k in taken if k[0] == command.topic and k[1] in command.targets and (command.id, k) not in filed
            ]
            self._apply_all(name, command, version, keys)

    def _parse(self, name: str, data: bytes) -> ResetCommand | None:
        try:
            return ResetCommand.from_json(data)
        except (ValueError, KeyError) as exc:
            log.warning("command node %s is not a reset command (%s); ignored", name, exc)
            return None

    def _load(self, name: str) -> tuple[ResetCommand, int] | None:
        try:
            data, stat = self._client.get(f"{self._root}/{name}")
        except NoNodeError:
            return None
        command = self._parse(name, data)
        if command is None or command.status != ACTIVE or command.topic not in self._topics:
            return None
        return command, stat.version

    def _apply_all(self, name: str, command: ResetCommand, version: int, keys: list[Key]) -> None:
        if not keys or not self._active:
            return
        # In parallel: a partition whose batch in hand runs long must not hold up the others.
        with ThreadPoolExecutor(max_workers=min(len(keys), MAX_PARALLEL), thread_name_prefix="jetkafka-reset") as pool:
            outcomes = list(pool.map(lambda key: self._apply(command, version, *key), keys))
        if not all(outcomes):
            self._retry(("command", name))

    def _apply(self, command: ResetCommand, version: int, topic: str, p: int) -> bool:
        """Apply ``command`` to one held partition, in a ``reset`` span (the reposition: the move
        filed, the batch in hand finished, the commit); False when it should be tried again."""
        attributes = partition_attributes(topic, p, self._channel.config.channel.group)
        attributes["jetkafka.reset.id"] = command.id
        attributes["jetkafka.reset.offset"] = command.targets[p]
        with operation_span(f"reset {topic}", attributes) as span:
            applied = self._apply_once(command, version, topic, p)
            span.set_attribute("jetkafka.reset.settled", applied)
            return applied

    def _apply_once(self, command: ResetCommand, version: int, topic: str, p: int) -> bool:
        if self._client.exists(marker_path(self._paths, command.id, p)):
            return True
        try:
            move = self._file(command, version, topic, p)
        except CommitFenced:
            log.info("%s[%d]: reset %s left to the partition's new owner", topic, p, command.id)
            return True
        return self._settled(command, topic, p, move)

    def _file(self, command: ResetCommand, version: int, topic: str, p: int) -> Move:
        """File the move of one held partition to the command's target, with the command's
        check and marker in its transaction; raises CommitFenced if the partition is not held."""
        channel = self._channel
        marker = marker_path(self._paths, command.id, p)
        target = command.targets[p]
        cmd_path = f"{self._root}/reset-{command.id}"

        def extra(tx: TransactionRequest) -> None:
            # Runs under the lease's lock, so its committed offset is the one being replaced.
            lease = channel.lease(topic, p)
            if lease is None:
                raise CommitFenced(topic, p, "reset refused: partition no longer held", "not_held")
            tx.check(cmd_path, version)
            tx.create(marker, marker_data(lease.committed, target, channel.consumer_id))

        return channel.file_move(topic, p, target, extra)

    def _settled(self, command: ResetCommand, topic: str, p: int, move: Move) -> bool:
        """Wait for a filed move and say how it ended; False when it should be tried again."""
        target = command.targets[p]
        try:
            if not move.wait(command.timeout_s) and move.cancel():
                raise TimeoutError(f"{topic}[{p}]: batch in hand did not finish within {command.timeout_s:g} s")
            move.wait(None)  # started in time: a commit, it ends soon
            old = move.outcome()
        except NodeExistsError:
            return True  # applied by a previous holder of the partition
        except (BadVersionError, NoNodeError):
            log.info("%s[%d]: reset %s changed or ended before it was applied here", topic, p, command.id)
            return True  # the command node's watch brings any new state
        except CommitFenced:
            log.info("%s[%d]: reset %s left to the partition's new owner", topic, p, command.id)
            return True
        except Exception as exc:  # noqa: BLE001 - whatever stopped the move is reported on the command and retried
            self._report(command.id, p, f"{self._channel.consumer_id}: {type(exc).__name__}: {exc}")
            log.warning("%s[%d]: reset %s to offset %d not applied yet: %s", topic, p, command.id, target, exc)
            return False
        log.info("%s[%d]: offset %s -> %d by reset %s", topic, p, old, target, command.id)
        return True

    def _report(self, command_id: str, p: int, message: str) -> None:
        path = error_path(self._paths, command_id, p)
        data = message.encode()
        try:
            try:
                self._client.create(path, data)
            except NodeExistsError:
                self._client.set(path, data)
        except Exception:
            log.debug("could not report the reset error of partition %d", p, exc_info=True)


class ResponderAddOn(ChannelAddOn):
    """The reset responder as a channel add-on: a :class:`CommandResponder` for each start of
    the channel, there before the channel takes its first partition, told of every take-over.

    ``start``/``stop`` run on the thread that starts or stops the channel, ``partitions_taken``
    on the rebalance thread.
    """

    def __init__(self) -> None:
        self.responder: CommandResponder | None = None

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        # Kept before it starts, so that a start failing half way is stopped by stop().
        self.responder = CommandResponder(channel, channel.zookeeper)
        self.responder.start()

    def stop(self) -> None:
        responder, self.responder = self.responder, None
        if responder is not None:
            responder.stop()

    def partitions_taken(self, keys: list[Key]) -> None:
        if (responder := self.responder) is not None:
            responder.partitions_taken(keys)
