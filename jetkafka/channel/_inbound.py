"""InboundChannel: consume a group's share of a topic's partitions with a pool of workers.

Life of a partition in a channel: the group membership takes it (fenced take-over in
ZooKeeper); the channel starts fetching at the committed offset (or at ``auto_offset_reset``,
committed at once so a later owner starts at the same place); workers take turns on it, one
at a time, batch after batch, in offset order; when it is released (rebalance, shutdown) the
worker holding it finishes its batch, calls ``on_stream_termination``, applies the response,
and only then gives up the owner node.

Delivery guarantee with ``BatchResponse.advance()``: at least once. A batch is committed after
the processor returned; a crash before the commit re-delivers at most the uncommitted batches
of the crashed instance, from the last committed offset. A graceful shutdown or rebalance
re-delivers nothing when ``on_stream_termination`` returns ``advance()`` (or when every batch
was advanced).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from jetkafka._client_logs import starting
from jetkafka.channel._add_ons import AddOns, ChannelAddOn, standard_add_ons
from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._committer import PartitionCommitter
from jetkafka.channel._context import ChannelContext
from jetkafka.channel._controls import ChannelControls
from jetkafka.channel._dead_letter import DeadLetterSink
from jetkafka.channel._ended_start import EndedStart, StartParts
from jetkafka.channel._failures import FailurePolicy
from jetkafka.channel._fetcher import ConsumerWrapper, Fetcher
from jetkafka.channel._hot_deploy import Change, HotDeploy
from jetkafka.channel._leases import PartitionLeases
from jetkafka.channel._moves import Move
from jetkafka.channel._partition import PartitionSnapshot
from jetkafka.channel._partition_table import PartitionTable
from jetkafka.channel._stats import ChannelStats
from jetkafka.channel._work_queue import PartitionQueue
from jetkafka.channel._worker import BatchRunner, work_partitions
from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.coordination._membership import GroupMembership
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._pause_markers import PauseWatch
from jetkafka.coordination._process_session import ProcessSession
from jetkafka.coordination._registry import new_consumer_id
from jetkafka.errors import ConfigError, JetkafkaError
from jetkafka.events import Key
from jetkafka.kafka_groups._mirror import MirrorSnapshot, OffsetMirror
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.processors._loading import load_processor

if TYPE_CHECKING:
    from kazoo.client import KazooClient, TransactionRequest

log = logging.getLogger("jetkafka.channel")


class InboundChannel:
    """A consumer of ``channel.topics`` in group ``channel.group``.

    Build it from a file (:meth:`from_yaml`), a dict (:meth:`from_dict`) or a
    :class:`JetkafkaConfig`; pass a processor instance, or let the channel build the one named
    in ``processor.class``. :meth:`start` connects and joins the group; :meth:`shutdown`
    leaves it gracefully. ``wrap_consumer(consumer, role)`` may stand between the channel's
    fetcher and each librdkafka consumer it makes (``role`` "fetch" or "metadata"; recovery's
    reader keeps its own), e.g. to instrument it; it must forward every call it does not handle.

    Add-ons (:mod:`jetkafka.channel._add_ons`) run beside the channel, started and stopped with
    it. Every constructor gives the same ones unless told otherwise: ``InboundChannel(config)``,
    :meth:`from_yaml`, :meth:`from_dict` and :func:`jetkafka._assembly.build_channel` all run the
    standard add-ons of :func:`jetkafka._assembly.standard_add_ons` (the reset responder always,
    recovery when ``recovery.max_partition_lag`` is set, metrics when ``metrics.port`` is set;
    ``recovery_processor`` goes to recovery). ``add_ons=[...]`` runs exactly those instead
    (``add_ons=()``: none; then ``recovery_processor`` must not be given).

    The channel is the :class:`~jetkafka.channel._running.RunningChannel` its add-ons and its
    processor's :class:`~jetkafka.channel._context.ChannelContext` see; every public member may
    be called from any thread.

    The channel is a facade over objects that each own their state: the
    :class:`PartitionTable` (the leased partitions and the pauses), :class:`PartitionLeases`
    (leases taken, asked back and lost: the membership's ``PartitionHolder``),
    :class:`ChannelControls` (pause, resume, reposition) and :class:`HotDeploy` (the watched
    file, reconfiguration). What one start builds (fetcher, work queue, membership, commit
    committer, runner, workers) lives here and is replaced by the next start; the methods of
    the channel itself run on the caller's thread.
    """

    def __init__(
        self,
        config: JetkafkaConfig,
        processor: BatchEventProcessor | None = None,
        *,
        controller: ProcessSession | None = None,
        pythonpath: Sequence[str] = (),
        consumer_id: str | None = None,
        recovery_processor: BatchEventProcessor | None = None,
        wrap_consumer: ConsumerWrapper | None = None,
        add_ons: Sequence[ChannelAddOn] | None = None,
    ) -> None:
        if add_ons is not None and recovery_processor is not None:
            raise TypeError("recovery_processor= is for the standard add-ons; with add_ons=, give it to recovery's add-on")
        if processor is None:
            if config.processor is None:
                raise ConfigError(
                    config.source,
                    "processor",
                    "no processor given",
                    'add a section processor: {class: "package.module:ClassName"}, '
                    "or pass processor= to InboundChannel",
                )
            processor = load_processor(config.processor, pythonpath)
        if not isinstance(processor, BatchEventProcessor):
            raise TypeError(f"processor must be a BatchEventProcessor, got {type(processor).__name__}")
        self.config = config
        self.processor = processor
        # One id for the life of this channel object, so resubscribes keep the group's order.
        self.consumer_id = consumer_id or new_consumer_id()
        self.stats = ChannelStats()
        self._given_controller = controller
        self._wrap_consumer = wrap_consumer
        self._controller: ProcessSession | None = None
        self._table = PartitionTable()
        self._controls = ChannelControls(self, self._table)
        self._leases = PartitionLeases(self, self._table, self._controls)
        self._hot_deploy = HotDeploy(self)
        self._queue: PartitionQueue | None = None
        self._fetcher: Fetcher | None = None
        self._membership: GroupMembership | None = None
        self._runner: BatchRunner | None = None
        self._committer: PartitionCommitter | None = None
        # commit_to_kafka: one for the channel object, so its counters outlive a resubscribe.
        self._mirror: OffsetMirror | None = None
        self._workers: list[threading.Thread] = []
        self._workers_stop = threading.Event()  # one per start: an ended start's workers may go on
        self._ended: list[EndedStart] = []  # ended starts still handing partitions over
        self._running = False
        self._shutdown_clean: bool | None = None
        self._pause_watch: PauseWatch | None = None
        self._pythonpath = tuple(pythonpath)
        self._add_ons = AddOns(standard_add_ons(recovery_processor) if add_ons is None else add_ons)

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], processor: BatchEventProcessor | None = None, **kwargs: Any
    ) -> InboundChannel:
        """A channel on the YAML file at ``path``, with the standard add-ons unless ``add_ons=``
        is given; ``kwargs`` are the constructor's."""
        return cls(load_config(path), processor, **kwargs)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], processor: BatchEventProcessor | None = None, **kwargs: Any
    ) -> InboundChannel:
        """A channel on already-parsed configuration data, with the standard add-ons unless
        ``add_ons=`` is given; ``kwargs`` are the constructor's."""
        return cls(parse_config(data), processor, **kwargs)

    # -- life cycle ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """Connect to ZooKeeper and Kafka, check the topics, join the group and start working.

        Raises :class:`ConnectError` or :class:`TopicNotFound` with the cause and the fix.
        """
        if self._running:
            return
        with starting():  # the outcome is one message of ours, not the clients' every attempt
            self._start()

    def _start(self) -> None:
        cfg = self.config.channel
        self._controller = self._given_controller or ProcessSession.shared(self.config.zookeeper)
        # The parts of an earlier start belong to its EndedStart now: a start that fails before
        # building its own must not stop those (they may still hand over a held-over partition).
        self._queue, self._membership, self._runner, self._committer = None, None, None, None
        try:
            self._queue = PartitionQueue(cfg.idle_ms)
            self._budget = BufferBudget(cfg.buffer_max_events, cfg.buffer_max_bytes)
            if not cfg.commit_to_kafka:
                self._mirror = None
            elif self._mirror is None:
                self._mirror = OffsetMirror(cfg.commit_interval_ms / 1000)
            else:  # a resubscribe may change the interval with other settings
                self._mirror.set_interval(cfg.commit_interval_ms / 1000)
            self._fetcher = Fetcher(
                self.config.kafka,
                cfg.group,
                self._table.get,
                self._queue.offer,
                self._budget,
                wrap_consumer=self._wrap_consumer,
                connection_timeout_s=cfg.kafka_connection_timeout_s,
                partitions=self._table.states,
                gave_back=self.stats.gave_back,
                log_end_pace_ms=cfg.log_end_pace_ms,
                mirror=self._mirror,
                may_mirror=self._session_lease_runs,
            )
            self._membership = GroupMembership(
                self._controller, cfg, self._leases, self.consumer_id, on_rebalance=self.stats.rebalanced
            )
            self._committer = PartitionCommitter(
                cfg, self._membership, self._fetcher, self.stats, self._committed, self._queue.offer
            )
            self._runner = BatchRunner(
                cfg,
                self.processor,
                self._membership,
                self._fetcher,
                self.stats,
                self._leases.remove,
                self.may_act,
                FailurePolicy(cfg, self.stats, self._dead_letter_sink(), self._queue.offer),
                self._committer,
                self._queue,
            )
            self.processor.on_start(ChannelContext(self, self._controller.client, self._membership.paths))
            self._fetcher.start()
            self._workers_stop = threading.Event()
            self._workers = [
                threading.Thread(
                    target=work_partitions,
                    args=(self._queue, self._runner, self._workers_stop),
                    name=f"jetkafka-worker-{i}",
                    daemon=True,
                )
                for i in range(cfg.threads)
            ]
            for t in self._workers:
                t.start()
            # Before joining: every take-over must find the add-ons there (pending resets, recovery).
            self._add_ons.start(self, self.processor)
            self._pause_watch = PauseWatch(
                self._controller.client,
                self._membership.paths,
                self.consumer_id,
                self._controls.paused_from_zookeeper,
                applied=self._controls.marker_paused,
            )
            self._membership.start()
        except BaseException:
            # What earlier starts hold over stays held over: a resubscribe whose start fails is
            # rolled back, and giving those up would let another instance take a partition
            # whose call still runs here.
            self._teardown(keep_earlier=True)
            raise
        self._running = True
        log.info(
            "channel %s started: consumer %s, topics %s, %d threads, coordinator %s",
            cfg.group,
            self.consumer_id,
            ",".join(cfg.topics),
            cfg.threads,
            cfg.coordinator,
        )

    @property
    def shutdown_clean(self) -> bool | None:
        """What the last :meth:`shutdown` returned (also the one ``with channel:`` makes on
        exit): True when every partition was released in time, False when
        ``shutdown_timeout_s`` passed with partitions still in hand; None before any shutdown.
        A hot deploy's release and resubscribe does not change it."""
        return self._shutdown_clean

    def shutdown(self, timeout: float | None = None) -> bool:
        """Leave the group gracefully; True when every partition was released in time.

        Stops watching the YAML file (see :meth:`watch`), stops taking partitions, deregisters
        (so others re-plan at once), lets each in-flight batch finish, calls
        ``on_stream_termination`` per partition and applies its response, then deletes each
        owner node as soon as that partition is done. The result is kept in
        :attr:`shutdown_clean`. A channel that is not running returns True.
        """
        self._hot_deploy.stop_watching()
        with self._hot_deploy.reconfiguring:
            clean = self._leave(timeout)
        self._shutdown_clean = clean
        return clean

    def _leave(self, timeout: float | None, hold_over: bool = False) -> bool:
        """Release every partition and stop this start; ``hold_over`` (a resubscribe): keep
        the partitions whose call outlasts ``timeout`` until it returns, instead of giving
        them up (:mod:`jetkafka.channel._ended_start`)."""
        if not self._running:
            if not hold_over:
                self._give_up_ended()
            return True
        self._running = False
        timeout = self.config.channel.shutdown_timeout_s if timeout is None else timeout
        assert self._membership is not None
        self._membership.leave_group()
        self._leases.release_requested(self._membership.release_all(), "shutdown")
        stuck = self._table.wait_empty(time.monotonic() + timeout)
        if stuck and not hold_over:  # held over, each is logged with its offset (EndedStart)
            log.error(
                "shutdown timed out after %.1f s with %s still in hand; their uncommitted batches will be "
                "re-read by the next owner",
                timeout,
                ", ".join(f"{t}[{p}]" for t, p in stuck),
            )
        if self._fetcher is not None and self._mirror is not None:
            # The last copies to Kafka leave while the session still runs (the mirror's fence).
            self._fetcher.flush_mirror()
        self._teardown(hold_over)
        try:
            self.processor.on_stop()
        except Exception:
            log.exception("%s.on_stop raised", type(self.processor).__name__)
        log.info("channel %s stopped: %s", self.config.channel.group, self.stats.summary_line())
        return not stuck

    def _dead_letter_sink(self) -> DeadLetterSink | None:
        policy = self.config.channel.on_error
        if policy.mode != "dead-letter" or not policy.dead_letter_topic:
            return None
        return DeadLetterSink(self.config.kafka, policy.dead_letter_topic, self.config.channel.group)

    def _teardown(self, hold_over: bool = False, keep_earlier: bool = False) -> None:
        """Stop this start's parts; what is still in the table then is held over until its
        call returns (``hold_over``), or given up with what earlier starts held over (unless
        ``keep_earlier``: a start that failed)."""
        if self._pause_watch is not None:
            self._pause_watch.stop()
            self._pause_watch = None
        self._add_ons.stop()
        ended = EndedStart(
            StartParts(
                self._queue,
                self._workers,
                self._workers_stop,
                self._committer,
                self._runner,
                self._membership,
                self._controller if self._given_controller is None else None,
            ),
            self._table.hold_over(),
            self._table,
        )
        self._workers = []
        self._committer = None
        if not hold_over and not keep_earlier:
            self._give_up_ended()
        if hold_over and ended.states:
            ended.hand_over_in_background()
            self._ended = [e for e in self._ended if not e.stopped] + [ended]
        else:
            ended.give_up(self._current_budget())
        if self._fetcher is not None:
            self._fetcher.stop()
        self._controller = None

    def _give_up_ended(self) -> None:
        """Give up what earlier starts still hold over (a shutdown)."""
        ended, self._ended = self._ended, []
        for earlier in ended:
            earlier.give_up(self._current_budget())

    def _current_budget(self) -> BufferBudget | None:
        return getattr(self, "_budget", None)

    def __enter__(self) -> InboundChannel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # A with statement has no result to return: shutdown_clean keeps it.
        self.shutdown()

    # -- operator controls (see jetkafka.channel._controls) ----------------------------------

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        """Stop fetching and processing (all partitions, a topic, or one partition).

        Returns at once, before the batch in hand of each partition ends: that batch finishes
        and its response is applied (committed on ``advance()``), then nothing more of the
        partition is processed until :meth:`resume`. Partitions stay owned and the session
        stays open. Partitions taken while paused start paused.
        """
        self._controls.pause(topic, partition)

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        """Undo :meth:`pause`; processing continues at the exact offset it stopped at."""
        self._controls.resume(topic, partition)

    @property
    def paused(self) -> bool:
        """Whether the whole channel is paused (by :meth:`pause` or `jetkafka pause`)."""
        return self._table.paused_all

    def reposition(
        self,
        topic: str,
        partition: int,
        offset: int,
        extra: Any = None,
        timeout: float = 30.0,
        reason: str = "reset",
    ) -> int | None:
        """Move an owned partition to ``offset`` and return the offset committed before.

        The move is carried out by the partition's next turn (see :mod:`jetkafka.channel._moves`):
        after the batch in hand, ahead of a release, also while paused or halted. It commits
        ``offset`` fenced (with ``extra`` operations in the same transaction), drops what was
        buffered, calls the processor's ``on_reposition`` and fetches on from ``offset``; a
        paused partition stays paused there.

        Raises :class:`CommitFenced` if the partition is not (or no longer) owned here, and
        :class:`TimeoutError` if its turn does not come within ``timeout`` (the batch in hand
        runs longer); then nothing was moved.
        """
        return self._controls.reposition(topic, partition, offset, extra, timeout, reason)

    def file_move(self, topic: str, partition: int, offset: int, extra: Any = None, reason: str = "reset") -> Move:
        """File a reposition on an owned partition and return at once; the partition's next
        turn carries it out (see :meth:`reposition`). Wait for it with ``move.wait(timeout)``,
        then ``move.outcome()`` (the offset committed before, or the error it failed with).

        Raises :class:`CommitFenced` if the partition is not (or no longer) owned here.
        """
        return self._controls.file_move(topic, partition, offset, extra, reason)

    # -- hot deploy (see jetkafka.channel._hot_deploy) ----------------------------------------

    def watch(
        self,
        path: str | os.PathLike[str] | None = None,
        load: Callable[[str | os.PathLike[str]], JetkafkaConfig] | None = None,
    ) -> None:
        """Apply every valid change of the YAML file (default: the one loaded) while running.

        ``load`` reads the file (default :func:`~jetkafka.config.load_config`); ``jetkafka run``
        passes one that also reads a ``process.yaml`` beside it, as it read the file at start.

        Call it after :meth:`start`: a change seen while the channel is not running is not
        applied (nor later). Changes are applied on the watcher's thread with
        :meth:`reconfigure`; a second call while watching does nothing; :meth:`shutdown`
        stops the watching, and a channel started again must be told to watch again. Raises
        :class:`ConfigError` when ``path`` (or the loaded file) is not a file, e.g. for a
        channel built with :meth:`from_dict` and no ``path``.
        """
        self._hot_deploy.watch(path, load)

    def reconfigure(self, new: JetkafkaConfig) -> Change:
        """Move the running channel onto ``new``: in place, or by releasing and resubscribing.

        A configuration that cannot run (a missing topic, a processor that cannot be built,
        a start that fails) is rejected with one logged error; the channel keeps running on the
        configuration it had.
        """
        return self._hot_deploy.reconfigure(new)

    # -- introspection ---------------------------------------------------------------------

    def owned_partitions(self) -> list[Key]:
        """The partitions this channel holds a lease on now, sorted."""
        return self._table.keys()

    def positions(self) -> dict[Key, int]:
        """Next offset to process of each leased partition."""
        return {s.key: s.position for s in self._table.states()}

    def partitions(self) -> list[PartitionSnapshot]:
        """Each leased partition now, sorted: position, last commit that landed, buffer, pause."""
        return [s.snapshot() for s in self._table.states() if s.lost_reason is None and not s.removed]

    # -- for the channel's parts and add-ons -------------------------------------------------

    @property
    def add_ons(self) -> tuple[ChannelAddOn, ...]:
        """The add-ons this channel starts and stops with itself, in start order."""
        return self._add_ons.all

    # -- what add-ons and the processor's context use (RunningChannel) ----------------------

    def waiting_downstream(self) -> AbstractContextManager[None]:
        budget = self._current_budget()
        return nullcontext() if budget is None else budget.waiting_downstream()

    @property
    def pythonpath(self) -> tuple[str, ...]:
        return self._pythonpath

    @property
    def zookeeper(self) -> KazooClient:
        return self._started_controller().client

    @property
    def paths(self) -> GroupPaths:
        return self._started_membership().paths

    @property
    def offsets(self) -> OffsetStore:
        return self._started_membership().offsets

    def zookeeper_state(self) -> str:
        controller = self._controller
        return str(controller.client.state) if controller is not None else "LOST"

    def lease_valid(self) -> bool:
        controller = self._controller
        return controller is not None and controller.lease.valid()

    def is_paused(self, key: Key) -> bool:
        return self._table.is_paused(key)

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        if self._fetcher is None:
            raise JetkafkaError(f"channel {self.config.channel.group} is not started")
        return self._fetcher.watermarks(topic, partition, timeout=timeout)

    def fetching(self) -> str | None:
        """None while the channel's consumer fetches (its thread runs and librdkafka reaches a
        broker); else why not (``/readyz``)."""
        fetcher = self._fetcher
        return "not started" if fetcher is None or not self._running else fetcher.fetching()

    def partition_counts(self, timeout: float = 10.0) -> dict[str, int]:
        """Partitions per subscribed topic, from Kafka's metadata (a topic missing there is
        left out); raises ConnectError when Kafka does not answer."""
        if self._fetcher is None:
            raise JetkafkaError(f"channel {self.config.channel.group} is not started")
        return self._fetcher.partition_counts(tuple(self.config.channel.topics), timeout=timeout, missing_ok=True)

    def record_commit(self, key: Key, offset: int) -> None:
        self._committed(key, offset)

    def _session_lease_runs(self) -> bool:
        # The mirror's fence: the bound of every partition lease this instance holds.
        controller = self._controller
        return controller is not None and controller.lease.valid()

    def kafka_mirror(self) -> MirrorSnapshot | None:
        mirror = self._mirror
        return None if mirror is None else mirror.snapshot()

    def _started_controller(self) -> ProcessSession:
        if self._controller is None:
            raise JetkafkaError(f"channel {self.config.channel.group} is not started")
        return self._controller

    def _started_membership(self) -> GroupMembership:
        if self._membership is None:
            raise JetkafkaError(f"channel {self.config.channel.group} is not started")
        return self._membership

    def may_act(self) -> bool:
        """Whether workers may start work: ZooKeeper connected and the local lease running
        (:class:`~jetkafka.coordination._session_lease.SessionLease`)."""
        return self._leases.may_act()

    def _committed(self, key: Key, offset: int) -> None:
        self.stats.committed(key, offset)
        if self.config.channel.commit_to_kafka and self._fetcher is not None:
            self._fetcher.mirror_commit(key, offset)

    def lease(self, topic: str, partition: int) -> Lease | None:
        state = self._table.get((topic, partition))
        return None if state is None or state.lost_reason else state.lease

    def commit_many(
        self,
        commits: dict[Key, tuple[Lease, int]],
        extra: Callable[[TransactionRequest], None] | None,
        expected: Mapping[Key, int | None] | None = None,
    ) -> None:
        self._leases.commit_outside_turns(commits, extra, expected)


__all__ = ["InboundChannel", "JetkafkaError"]
