"""A paused channel starts no recovery batch, not even the one the rate was holding back.

Injected: a backlog recovered at 20 events a second in batches of 20, so the recovery thread
spends about a second before each batch waiting for the rate's tokens; the channel is paused
while it waits (right after a recovery batch arrived), kept paused for 2.5 s, then resumed.
Asserted: no recovery batch reaches the processor after ``pause()`` returned and before
``resume()``; after the resume, recovery finishes and every gap event is recovered once.
Real ZooKeeper and broker, the channel in this process.
"""

from __future__ import annotations

import time
from typing import Any

from kazoo.client import KazooClient

from tests.recovery import Recorder
from tests.recovery.test_backlog import backlog, recovering_channel
from tests.support.channels import wait_until

RATE, BATCH, LAG, RECORDS = 20, 20, 50, 150


def test_a_recovery_batch_held_back_by_the_rate_does_not_start_once_paused(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    backlog(zk, produce, topic, 1, RECORDS)  # committed 0: the gap is [0, 100), live from 100
    live, rec = Recorder(expect_recovery=False), Recorder(expect_recovery=True)
    channel = recovering_channel(
        zk_connect, kafka_config, topic, live, rec, max_partition_lag=LAG, max_rate=RATE, batch_max_events=BATCH
    )
    channel.start()
    try:
        wait_until(lambda: len(rec.offsets()) >= BATCH, 30, "the first recovery batch")
        seen = len(rec.offsets())
        wait_until(lambda: len(rec.offsets()) > seen, 10, "the next recovery batch")  # the thread now waits ~1 s
        channel.pause()
        paused = time.monotonic()
        time.sleep(2.5)
        resumed = time.monotonic()
        channel.resume()
        late = sorted({(round(d.at - paused, 2), d.offset - d.offset % BATCH) for d in rec.snapshot() if paused < d.at < resumed})
        wait_until(lambda: len(rec.offsets()) >= RECORDS - LAG, 30, "the whole gap recovered after the resume")
    finally:
        channel.shutdown()
    assert not late, f"recovery batches started while paused (seconds after the pause, first offset): {late}"
    assert sorted(rec.offsets()) == list(range(RECORDS - LAG))
    assert not live.violations and not rec.violations, live.violations + rec.violations
