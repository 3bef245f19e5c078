"""Repositions (offset resets) carried out by the partition's own turn, against everything else a
turn does: a release racing the reset, batches on both sides of it, a pause, a halt."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import yaml
from kazoo.client import KazooClient

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._protocol import DONE, ResetCommand, command_path
from tests.support.channels import channel_config, committed_offsets, make_channel, values, wait_until
from tests.support.processes import REPO


class HoldsOnRelease(BatchEventProcessor):
    """Moves on without committing (``get_next``); on release it commits what it processed
    (``advance``), after the test lets it go on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: list[int] = []
        self.entered = threading.Event()  # on_stream_termination began
        self.go = threading.Event()
        self.repositions: list[tuple[int, int, str]] = []  # (old, new, reason)

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with self.lock:
            self.offsets.extend(e.offset for e in events)
        return BatchResponse.get_next()

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        with self.lock:
            self.repositions.append((old_offset, source.head_offset, reason))

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        self.entered.set()
        self.go.wait(15)
        return BatchResponse.advance()


def test_a_release_racing_a_reset_cannot_commit_the_old_position_over_it(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    """The release of a partition and a reset of it used to run on two threads: a release whose
    commit of the old position was ready before the reset's commit landed wrote it just after,
    and the reset was lost while the command reported it done."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    processor = HoldsOnRelease()
    channel = make_channel(zk_connect, kafka_config, topic, processor, threads=2)
    channel.start()
    stopper: threading.Thread | None = None
    try:
        wait_until(lambda: channel.positions().get((topic, 0)) == 100, what="every record processed")
        assert committed_offsets(zk, "g", topic) == {0: 0}  # nothing committed past the start

        def hook(tx: Any) -> None:
            # Runs inside the reset's transaction, under the partition's lease: start a graceful
            # shutdown, and give its release every chance to reach its own commit first.
            nonlocal stopper
            stopper = threading.Thread(target=channel.shutdown, name="stopper")
            stopper.start()
            processor.entered.wait(3)
            processor.go.set()
            time.sleep(0.5)  # a release that got this far is now waiting for the lease's lock

        old = channel.reposition(topic, 0, 10, extra=hook, timeout=20)
        processor.go.set()
        assert old == 0
        assert stopper is not None
        stopper.join(30)
        assert not stopper.is_alive()
    finally:
        processor.go.set()
        channel.shutdown()
    # The release committed from the reset's position, not over it.
    assert committed_offsets(zk, "g", topic) == {0: 10}
    assert processor.repositions == [(100, 10, "reset")]
    assert zk.get_children(f"/consumers/g/owners/{topic}") == []


class Recorder(BatchEventProcessor):
    def __init__(self, delay_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, int, int]] = []  # ("batch", first, last) or ("reposition", old, new)
        self.delay_s = delay_s

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        time.sleep(self.delay_s)
        with self.lock:
            self.calls.append(("batch", events.first_offset, events.last_offset))
        return BatchResponse.advance()

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        assert source.committed_offset == source.head_offset
        with self.lock:
            self.calls.append(("reposition", old_offset, source.head_offset))

    def snapshot(self) -> list[tuple[str, int, int]]:
        with self.lock:
            return list(self.calls)


def test_a_reset_of_a_busy_partition_is_told_to_the_processor_between_two_batches(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(3000, 1))
    processor = Recorder(delay_s=0.02)
    channel = make_channel(zk_connect, kafka_config, topic, processor, batch_max_events=50)
    channel.start()
    try:
        wait_until(lambda: len(processor.snapshot()) >= 5, what="a few batches")
        old = channel.reposition(topic, 0, 7, timeout=20)
        wait_until(lambda: channel.positions().get((topic, 0)) == 3000, 60, what="the log end again")
    finally:
        channel.shutdown()
    calls = processor.snapshot()
    moves = [i for i, c in enumerate(calls) if c[0] == "reposition"]
    assert len(moves) == 1, calls
    i = moves[0]
    _, moved_from, moved_to = calls[i]
    assert moved_to == 7 and old is not None and old <= moved_from
    # Batches chain up to the move, the first one after it starts at the new offset, and they
    # chain again from there to the end: nothing of the old position after the callback.
    before, after = list(calls[:i]), list(calls[i + 1 :])
    assert before[0][1] == 0 and before[-1][2] + 1 == moved_from
    assert all(a[2] + 1 == b[1] for a, b in itertools.pairwise(before))
    assert after[0][1] == 7 and after[-1][2] == 2999
    assert all(a[2] + 1 == b[1] for a, b in itertools.pairwise(after))
    assert committed_offsets(zk, "g", topic) == {0: 3000}


def test_a_paused_partition_is_moved_and_stays_paused_until_resumed(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(200, 1))
    processor = Recorder()
    channel = make_channel(zk_connect, kafka_config, topic, processor)
    channel.start()
    try:
        wait_until(lambda: channel.positions().get((topic, 0)) == 200, what="every record processed")
        channel.pause()
        assert channel.reposition(topic, 0, 150, timeout=10) == 200
        assert committed_offsets(zk, "g", topic) == {0: 150}
        time.sleep(1.0)
        assert processor.snapshot()[-1] == ("reposition", 200, 150)  # no batch while paused
        channel.resume()
        wait_until(lambda: channel.positions().get((topic, 0)) == 200, what="re-read from 150 after resume")
    finally:
        channel.shutdown()
    batches = [c for c in processor.snapshot() if c[0] == "batch"]
    assert sum(last - first + 1 for _, first, last in batches) == 250
    assert committed_offsets(zk, "g", topic) == {0: 200}


def test_a_reset_pending_at_take_over_runs_before_any_batch_of_the_old_position(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Any
) -> None:
    """A reset whose command process died while another instance held the partition is applied
    by the partition's next owner at take-over: its first turn is the move, so not one batch is
    processed from the old committed offset."""
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    paths = GroupPaths("g")
    previous = KazooClient(hosts=zk_connect)
    previous.start(timeout=15)
    try:
        PartitionOwnership(previous, paths, "previous-owner").prepare(topic)
        OffsetStore(previous, paths).write_unfenced(topic, 0, 200)
        assert PartitionOwnership(previous, paths, "previous-owner").take(topic, 0) is not None
        # A busy group keeps a week of finished commands: looking them all up after a take-over
        # takes a while, and the first batch must not get ahead of the reset meanwhile.
        for i in range(300):
            finished = ResetCommand(f"old-{i}", topic, "offset:0", None, {0: 0}).with_status(DONE)
            previous.create(f"{command_path(paths, finished.id)}", finished.to_json(), makepath=True)
        config_path = tmp_path / "group.yaml"
        config_path.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, [topic])))
        command = subprocess.Popen(
            [sys.executable, "-m", "jetkafka", "offsets", "reset", "--config", str(config_path), "--topic", topic,
             "--to", "50", "--timeout", "300"],
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        commands = paths.root + "/commands"
        try:
            wait_until(
                lambda: any(
                    c.startswith("reset-") and not c.startswith("reset-old-") for c in previous.get_children(commands)
                ),
                timeout=60,
                what="the reset command node",
            )
        finally:
            os.kill(command.pid, signal.SIGKILL)
            command.wait(10)
        processor = Recorder()
        channel = make_channel(zk_connect, kafka_config, topic, processor)
        channel.start()
    finally:
        previous.stop()  # its owner node goes with the session: the channel takes the partition
        previous.close()
    try:
        wait_until(lambda: channel.positions().get((topic, 0)) == 300, 60, what="the log end")
    finally:
        channel.shutdown()
    calls = processor.snapshot()
    assert calls[0] == ("reposition", 200, 50), calls[:3]
    assert calls[1][:2] == ("batch", 50)
    assert committed_offsets(zk, "g", topic) == {0: 300}


def test_a_reset_whose_commit_landed_without_an_answer_is_completed_not_undone(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    """Injected: the reset's transaction lands but its answer and the read-back are lost
    (CommitUncertain, the lease one version behind). Going on from the old position would let
    the next commit adopt the reset's version and write the old offset over it while the
    reset's marker says done. Asserted: the move is tried again before any batch, finds it
    landed, and the partition re-reads from the reset's offset."""
    from jetkafka.coordination._offsets import CommitUncertain

    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    processor = Recorder()
    channel = make_channel(zk_connect, kafka_config, topic, processor)
    channel.start()
    marker = f"/test-markers/{topic}"
    zk.ensure_path("/test-markers")
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, what="every record committed")
        store = channel._membership.offsets  # type: ignore[union-attr]
        real = store.commit_many
        lost = threading.Event()

        def answer_lost(commits: Any, extra: Any = None, expected: Any = None) -> None:
            if extra is None or lost.is_set():
                return real(commits, extra, expected)
            ((_, (lease, _)),) = commits.items()
            version, committed = lease.offset_version, lease.committed
            real(commits, extra, expected)  # it lands...
            lease.offset_version, lease.committed = version, committed  # ...and no answer came
            lost.set()
            raise CommitUncertain("connection lost (injected)")

        store.commit_many = answer_lost  # type: ignore[method-assign]

        def reset_marker(tx: Any) -> None:  # what a reset command adds: its done marker
            tx.create(marker, b"done")

        old = channel.reposition(topic, 0, 10, extra=reset_marker, timeout=20)
        assert lost.is_set() and old == 100
        produce(topic, values(10, 1, start=100))
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 110}, what="the re-read and the new records")
    finally:
        channel.shutdown()
    calls = processor.snapshot()
    moves = [i for i, c in enumerate(calls) if c[0] == "reposition"]
    assert [calls[i] for i in moves] == [("reposition", 100, 10)]
    after = calls[moves[0] + 1 :]
    assert after[0][1] == 10 and after[-1][2] == 109
    assert all(a[2] + 1 == b[1] for a, b in itertools.pairwise(after))


def test_a_reset_still_unconfirmed_when_the_partition_is_lost_answers_its_waiter(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    """Injected: every attempt of a reset's commit goes unanswered (CommitUncertain), then the
    session expires for real. Asserted: the waiter is answered (CommitFenced: the next owner
    applies the reset) instead of waiting forever, and the channel goes on."""
    from jetkafka.coordination._errors import CommitUncertain
    from jetkafka.errors import CommitFenced
    from tests.support.zk_faults import expire_session

    topic = topic_factory(partitions=1)
    produce(topic, values(20, 1))
    processor = Recorder()
    channel = make_channel(zk_connect, kafka_config, topic, processor)
    channel.start()
    outcome: list[BaseException | int | None] = []
    try:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 20}, what="every record committed")
        store = channel._membership.offsets  # type: ignore[union-attr]
        real = store.commit_many
        attempts = [0]

        def unanswered(commits: Any, extra: Any = None, expected: Any = None) -> None:
            if extra is None:
                return real(commits, extra, expected)
            attempts[0] += 1
            raise CommitUncertain("no answer (injected)")

        store.commit_many = unanswered  # type: ignore[method-assign]

        def reset() -> None:
            try:
                outcome.append(channel.reposition(topic, 0, 5, extra=lambda tx: None, timeout=5))
            except BaseException as exc:  # noqa: BLE001 - the outcome is what is asserted
                outcome.append(exc)

        waiter = threading.Thread(target=reset, name="waiter")
        waiter.start()
        wait_until(lambda: attempts[0] >= 2, what="the move tried again")
        expire_session(channel._controller.client)  # type: ignore[union-attr]
        waiter.join(20)
        assert not waiter.is_alive(), "the reset's waiter was never answered"
        store.commit_many = real  # type: ignore[method-assign]
        produce(topic, values(5, 1, start=20))
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 25}, what="the channel going on")
    finally:
        channel.shutdown()
    assert len(outcome) == 1 and isinstance(outcome[0], CommitFenced), outcome
