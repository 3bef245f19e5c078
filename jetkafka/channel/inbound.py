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
from collections.abc import Mapping, Sequence
from typing import Any

from jetkafka.channel.budget import BufferBudget
from jetkafka.channel.commit_pipeline import CommitPipeline
from jetkafka.channel.context import ChannelContext
from jetkafka.channel.controls import ChannelControls
from jetkafka.channel.dead_letter import DeadLetterSink
from jetkafka.channel.failures import FailurePolicy
from jetkafka.channel.fetcher import ConsumerWrapper, Fetcher
from jetkafka.channel.holdings import PartitionHoldings
from jetkafka.channel.hot_deploy import ConfigWatcher, HotDeploy
from jetkafka.channel.partition import PartitionSnapshot, PartitionState
from jetkafka.channel.stats import ChannelStats
from jetkafka.channel.work_queue import PartitionQueue
from jetkafka.channel.worker import BatchRunner
from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.coordination.membership import GroupMembership
from jetkafka.coordination.ownership import Lease
from jetkafka.coordination.pause_markers import PauseWatch
from jetkafka.coordination.process_session import ProcessSession
from jetkafka.coordination.registry import new_consumer_id
from jetkafka.errors import CommitFenced, ConfigError, JetkafkaError
from jetkafka.events import Key
from jetkafka.processors.base import BatchEventProcessor
from jetkafka.processors.loading import load_processor

log = logging.getLogger("jetkafka.channel")

# Turns a worker runs in a row on one partition before it gives it back all the same, so no
# worker stays on one partition without passing through the queue.
_KEPT_TURNS = 64


class InboundChannel(ChannelControls, HotDeploy, PartitionHoldings):
    """A consumer of ``channel.topics`` in group ``channel.group``.

    Build it from a file (:meth:`from_yaml`), a dict (:meth:`from_dict`) or a
    :class:`JetkafkaConfig`; pass a processor instance, or let the channel build the one named
    in ``processor.class``. :meth:`start` connects and joins the group; :meth:`shutdown`
    leaves it gracefully. ``wrap_consumer(consumer, role)`` may stand between the channel's
    fetcher and each librdkafka consumer it makes (``role`` "fetch" or "metadata"; recovery's
    reader keeps its own), e.g. to instrument it; it must forward every call it does not handle.
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
    ) -> None:
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
        self._states: dict[Key, PartitionState] = {}
        self._states_cond = threading.Condition()
        self._queue: PartitionQueue | None = None
        self._fetcher: Fetcher | None = None
        self._membership: GroupMembership | None = None
        self._runner: BatchRunner | None = None
        self._pipeline: CommitPipeline | None = None
        self._workers: list[threading.Thread] = []
        self._workers_stop = threading.Event()
        self._suspended = False
        self._lease_lapsed = False  # logged once per lapse of the local lease
        self._running = False
        self._paused_all = False
        # What the pause markers in ZooKeeper last asked for (a pause through the API is not
        # theirs to undo): the next start's watch compares the markers with it.
        self._marker_paused = False
        self._paused: set[Key] = set()
        self._pause_watch: PauseWatch | None = None
        self._pythonpath = tuple(pythonpath)
        self._watcher: ConfigWatcher | None = None
        self._reconfiguring = threading.Lock()
        self._responder: Any = None  # jetkafka.ops.responder.CommandResponder while running
        self._metrics: Any = None  # jetkafka.ops.metrics_endpoint.MetricsHandle while running
        self._recovery_processor = recovery_processor  # see jetkafka.recovery.service.choose_processor
        self._recovery: Any = None  # jetkafka.recovery.RecoveryService while running with recovery on

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], processor: BatchEventProcessor | None = None, **kwargs: Any
    ) -> InboundChannel:
        return cls(load_config(path), processor, **kwargs)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], processor: BatchEventProcessor | None = None, **kwargs: Any
    ) -> InboundChannel:
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
        cfg = self.config.channel
        self._controller = self._given_controller or ProcessSession.shared(self.config.zookeeper)
        try:
            self._queue = PartitionQueue(cfg.idle_ms)
            self._budget = BufferBudget(cfg.buffer_max_events, cfg.buffer_max_bytes)
            self._fetcher = Fetcher(
                self.config.kafka,
                cfg.group,
                self._state,
                self._queue.offer,
                self._budget,
                wrap_consumer=self._wrap_consumer,
            )
            self._membership = GroupMembership(
                self._controller, cfg, self, self.consumer_id, on_rebalance=self.stats.rebalanced
            )
            self._pipeline = (
                CommitPipeline(
                    self._membership.offsets,
                    self._committed,
                    self.stats.commit_refused,
                    self._queue.offer,
                    cfg.commit_interval_ms / 1000,
                )
                if cfg.pipelined_commits
                else None
            )
            self._runner = BatchRunner(
                cfg,
                self.processor,
                self._membership,
                self._fetcher,
                self.stats,
                self._remove,
                self._may_act,
                FailurePolicy(cfg, self.stats, self._dead_letter_sink()),
                self._pipeline,
            )
            self.processor.on_start(ChannelContext(self, self._controller.client, self._membership.paths))
            self._fetcher.start()
            self._workers_stop.clear()
            self._workers = [
                threading.Thread(target=self._work, name=f"jetkafka-worker-{i}", daemon=True)
                for i in range(cfg.threads)
            ]
            for t in self._workers:
                t.start()
            from jetkafka.ops.responder import CommandResponder

            # Before joining: every take-over must find the responder there to apply pending resets.
            self._responder = CommandResponder(self, self._controller.client)
            self._responder.start()
            from jetkafka.recovery import RecoveryService

            self._recovery = RecoveryService.for_channel(self, self._recovery_processor)  # before take-overs
            if self.config.metrics.port is not None:
                from jetkafka.ops.metrics_endpoint import attach_channel

                self._metrics = attach_channel(self)
            self._pause_watch = PauseWatch(
                self._controller.client,
                self._membership.paths,
                self.consumer_id,
                self._paused_from_zookeeper,
                applied=self._marker_paused,
            )
            self._membership.start()
        except BaseException:
            self._teardown()
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

    def shutdown(self, timeout: float | None = None) -> bool:
        """Leave the group gracefully; True when every partition was released in time.

        Stops taking partitions, deregisters (so others re-plan at once), lets each in-flight
        batch finish, calls ``on_stream_termination`` per partition and applies its response,
        then deletes each owner node as soon as that partition is done.
        """
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        with self._reconfiguring:
            return self._leave(timeout)

    def _leave(self, timeout: float | None) -> bool:
        if not self._running:
            return True
        self._running = False
        timeout = self.config.channel.shutdown_timeout_s if timeout is None else timeout
        assert self._membership is not None
        self._membership.leave_group()
        self.release_requested(self._membership.release_all(), "shutdown")
        deadline = time.monotonic() + timeout
        with self._states_cond:
            while self._states and time.monotonic() < deadline:
                self._states_cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            stuck = sorted(self._states)
        if stuck:
            log.error(
                "shutdown timed out after %.1f s with %s still in hand; their uncommitted batches will be "
                "re-read by the next owner",
                timeout,
                ", ".join(f"{t}[{p}]" for t, p in stuck),
            )
        self._teardown()
        try:
            self.processor.on_stop()
        except Exception:
            log.exception("%s.on_stop raised", type(self.processor).__name__)
        log.info("channel %s stopped: %s", self.config.channel.group, self.stats.summary())
        return not stuck

    def _dead_letter_sink(self) -> DeadLetterSink | None:
        policy = self.config.channel.on_error
        if policy.mode != "dead-letter" or not policy.dead_letter_topic:
            return None
        return DeadLetterSink(self.config.kafka, policy.dead_letter_topic, self.config.channel.group)

    def _paused_from_zookeeper(self, paused: bool) -> None:
        # Watch callbacks run on kazoo's thread; pausing writes to ZooKeeper, so hand it over.
        self._marker_paused = paused
        if self._controller is not None:
            self._controller.call(self.pause if paused else self.resume)

    def _teardown(self) -> None:
        if self._pause_watch is not None:
            self._pause_watch.stop()
            self._pause_watch = None
        if self._metrics is not None:
            self._metrics.detach()
            self._metrics = None
        if self._responder is not None:
            self._responder.stop()
            self._responder = None
        if self._recovery is not None:
            self._recovery.stop()
            self._recovery = None
        self._workers_stop.set()
        if self._queue is not None:
            self._queue.close()
        for t in self._workers:
            t.join(timeout=5)
        self._workers = []
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        if self._runner is not None and self._runner.failures.dead_letter is not None:
            self._runner.failures.dead_letter.close()
        if self._membership is not None:
            self._membership.stop()
        if self._fetcher is not None:
            self._fetcher.stop()
        if self._controller is not None and self._given_controller is None:
            self._controller.release()
        self._controller = None

    def __enter__(self) -> InboundChannel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- introspection ---------------------------------------------------------------------

    def owned_partitions(self) -> list[Key]:
        """The partitions this channel holds now, sorted."""
        with self._states_cond:
            return sorted(self._states)

    def positions(self) -> dict[Key, int]:
        """Next offset to process of each held partition."""
        with self._states_cond:
            return {k: s.position for k, s in self._states.items()}

    def partitions(self) -> list[PartitionSnapshot]:
        """Each held partition now, sorted: position, last commit that landed, buffer, pause."""
        with self._states_cond:
            states = [s for _, s in sorted(self._states.items())]
        return [s.snapshot() for s in states if s.lost_reason is None and not s.removed]

    def _may_act(self) -> bool:
        """Whether workers may start work: ZooKeeper connected and the local lease running
        (:class:`~jetkafka.coordination.session_lease.SessionLease`)."""
        if self._suspended:
            return False
        controller = self._controller
        if controller is None:
            return False
        if controller.lease.valid():
            if self._lease_lapsed:
                self._lease_lapsed = False
                log.info("ZooKeeper answered again: the local lease runs; starting batches again")
            return True
        if not self._lease_lapsed:
            self._lease_lapsed = True
            lease = controller.lease
            if lease.voided:
                log.warning("ZooKeeper session lost: starting no batch until a new session is established")
            else:
                log.warning(
                    "no answer from ZooKeeper for %.1f s (session timeout %.1f s less lease_margin_s %.1f s): "
                    "the session may have expired unnoticed; starting no batch until ZooKeeper answers",
                    lease.since_contact(),
                    lease.timeout_s,
                    lease.margin_s,
                )
        return False

    def _committed(self, key: Key, offset: int) -> None:
        self.stats.committed(key, offset)
        if self.config.channel.commit_to_kafka and self._fetcher is not None:
            self._fetcher.mirror_commit(key, offset)

    def _lease(self, topic: str, partition: int) -> Lease | None:
        state = self._states.get((topic, partition))
        return None if state is None or state.lost_reason else state.lease

    def _commit_many(
        self, commits: dict[Key, tuple[Lease, int]], extra: Any, expected: Mapping[Key, int | None] | None = None
    ) -> None:
        assert self._membership is not None
        try:
            self._membership.offsets.commit_many(commits, extra, expected)
        except CommitFenced as exc:
            self._refused(commits, exc)
            raise
        self._committed_outside_turns(commits)

    def _refused(self, commits: Mapping[Key, tuple[Lease, int]], exc: CommitFenced) -> None:
        """A commit outside the partitions' turns was refused: count it, and lose the hold."""
        key = (exc.topic, exc.partition)
        self.stats.commit_refused(key, exc.cause)
        state = self._states.get(key)
        refused = commits.get(key)
        # Only the hold that was refused is lost; a newer hold of the partition stays.
        if state is not None and refused is not None and state.lease is refused[0]:
            self.partitions_lost([key], exc.reason)

    def _committed_outside_turns(self, commits: dict[Key, tuple[Lease, int]]) -> None:
        """After a processor's own multi-partition commit: it is now the newest commit."""
        for key, (lease, offset) in commits.items():
            state = self._states.get(key)
            if state is not None and state.lease is lease:
                state.advanced = None  # revert() goes back to this commit, not an older advance
            self._committed(key, offset)

    # -- the workers -----------------------------------------------------------------------

    def _work(self) -> None:
        assert self._queue is not None and self._runner is not None
        queue, runner = self._queue, self._runner
        while not self._workers_stop.is_set():
            state = queue.take(timeout=0.5)
            if state is None:
                if queue.closed:  # a worker of an earlier start, outlasting its teardown
                    return
                continue
            try:
                runner.run_turn(state)
                for _ in range(_KEPT_TURNS):
                    if self._workers_stop.is_set() or not queue.keep(state):
                        break
                    runner.run_turn(state)
            except Exception:
                # Kafka or ZooKeeper calls inside a turn can fail; the partition is retried.
                log.exception("%s[%d]: turn failed at offset %d; retrying in 1 s", *state.key, state.position)
                state.not_before = time.monotonic() + 1.0
            finally:
                queue.give_back(state)


__all__ = ["InboundChannel", "JetkafkaError"]
