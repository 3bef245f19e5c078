"""A frozen Spark instance writes nothing once its local lease ran out.

Injected: a ``jetkafka run`` Spark instance (A) is stopped with SIGSTOP inside ``fn``, after its
micro-batch K was recorded and before anything was written, and kept stopped past its ZooKeeper
session timeout. A second instance (B, in this process) takes the partitions, replays K under
the same id and commits everything. Then A gets SIGCONT: its ``fn`` wakes up and tries to write
K. Asserted: A publishes no slice of K after the thaw (its fence refuses: the lease ran out,
the holds are gone); every slice A publishes later belongs to a partition it took again, under
a fencing token greater than any B held for it; A logs why it did not write; the output holds
every event exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import SparkMicroBatchProcessor
from tests.spark.helpers import audited_writer, read_audit, read_ids
from tests.spark.test_crash_replay import member_config
from tests.support.channels import channel_config, wait_until
from tests.support.processes import Member

pytestmark = pytest.mark.slow

PARTITIONS = 2
SESSION_TIMEOUT_S = 4
FIRST, MORE = 2_000, 200
PAUSE_S = 8.0  # A sleeps this long inside fn before writing: the SIGSTOP lands there


def test_frozen_instance_writes_no_slice_after_its_lease_ran_out(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    events = generate_events(FIRST + MORE, seed=17)
    produce(topic, [(i % PARTITIONS, None, encode(e)) for i, e in enumerate(events[:FIRST])])
    out, audit, signal_file = str(tmp_path / "events"), str(tmp_path / "audit.jsonl"), tmp_path / "in-fn"
    fn_options = {"path": out, "audit": audit, "signal_file": str(signal_file), "pause_s": PAUSE_S}
    config = member_config(zk_connect, kafka_config, topic, "tests.spark.helpers:audited_writer", fn_options)
    config["zookeeper"]["session_timeout_s"] = SESSION_TIMEOUT_S
    store = OffsetStore(zk, GroupPaths("g"))
    owners = PartitionOwnership(zk, GroupPaths("g"), "test")
    a = Member(tmp_path, "a", config)
    b: InboundChannel | None = None
    try:
        wait_until(signal_file.exists, timeout=300, what="A's fn to start its first micro-batch")
        os.kill(a.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        frozen_batch = int(signal_file.read_text().split()[0])

        processor = SparkMicroBatchProcessor(
            audited_writer(out, audit, str(signal_file), 0.0),
            value_format="json", schema=EVENT_SCHEMA, max_events=1_000, max_interval_ms=500, spark=spark,
        )
        b = InboundChannel.from_dict(
            {**channel_config(zk_connect, kafka_config, [topic], batch_max_events=500),
             "zookeeper": {"connect": zk_connect, "session_timeout_s": SESSION_TIMEOUT_S}},
            processor=processor,
        )
        b.start()
        half = FIRST // PARTITIONS
        wait_until(
            lambda: store.read_all(topic) == {p: half for p in range(PARTITIONS)}, timeout=180,
            what="B to take over, replay A's micro-batch and commit everything",
        )
        assert processor.stats()["replays"] >= 1
        time.sleep(max(0.0, stopped + SESSION_TIMEOUT_S + 2 - time.monotonic()))
        os.kill(a.pid, signal.SIGCONT)
        resumed = time.time()

        # A registers again and takes back its share, under new holds.
        wait_until(
            lambda: len(set(owners.owners(topic).values())) == 2, timeout=120, what="A to own a partition again"
        )
        produce(topic, [(i % PARTITIONS, None, encode(e)) for i, e in enumerate(events[FIRST:])])
        end = (FIRST + MORE) // PARTITIONS
        wait_until(
            lambda: store.read_all(topic) == {p: end for p in range(PARTITIONS)}, timeout=180,
            what="every offset committed by the two instances",
        )
        assert a.terminate(90) == 0, a.log()[-3000:]
        assert b.shutdown()
    finally:
        if b is not None and b.running:
            b.shutdown()
        a.stop_quietly()

    entries = read_audit(audit)
    mine = os.getpid()
    thawed = [e for e in entries if e["pid"] == a.pid and e["at"] >= resumed]
    frozen_runs = [e for e in thawed if e["batch_id"] == frozen_batch]
    assert frozen_runs, "A's frozen fn never went on after SIGCONT"
    assert all(e["published"] == [] for e in frozen_runs), f"A published after the thaw: {frozen_runs}"
    b_tokens: dict[str, int] = {}
    for e in entries:
        if e["pid"] == mine:
            for key, token in e["tokens"].items():
                b_tokens[key] = max(token, b_tokens.get(key, -1))
    for e in thawed:
        for leaf in e["published"]:
            partition = int(leaf.rsplit("=", 1)[1]) if "=" in leaf else -1
            key = f"{topic}/{partition}"
            assert key in e["tokens"] and e["tokens"][key] > b_tokens.get(key, -1), (
                f"A published {leaf} after the thaw under token {e['tokens'].get(key)}; B held it up to {b_tokens.get(key)}"
            )
    log = a.log()
    assert "not written" in log or "not held any more" in log, log[-3000:]

    ids = [i for i, _ in read_ids(out)]
    total = FIRST + MORE
    assert len(ids) == total, f"{len(ids) - len(set(ids))} duplicates, {total - len(set(ids))} missing"
    assert set(ids) == {e["id"] for e in events}
