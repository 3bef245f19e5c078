"""SIGTERM one of three ``jetkafka run`` processes under load.

Injected: SIGTERM to one process while a producer writes steadily to a 12-partition topic.
Asserted: it exits 0 after calling ``on_stream_termination`` for each of its partitions; the
two others own every one of its partitions within the documented 2 s (driven by watches: the
timer rebalance is set far beyond the test); no other partition changes owner; at the end every
acknowledged id was delivered exactly once.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

from kazoo.client import KazooClient

from tests.support.event_log import delivered_ids, read_event_log
from tests.support.group_watch import Sampler, consumer_pids, owners
from tests.support.load import AckedProducer, delivery_report, wait_delivered, wait_for
from tests.support.members import member_config, running_members
from tests.support.processes import Member

PARTITIONS = 12
HANDOFF_BOUND_S = 2.0  # docs/guarantees.md: taken by the others within about a second (≤ 2 s)


def test_sigterm_one_of_three_hands_over_at_once_exactly_once(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict, topic_factory
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    events = tmp_path / "events.log"
    config = member_config(
        zk_connect,
        kafka_config,
        [topic],
        events,
        threads=3,
        batch_max_events=50,
        rebalance_interval_s=600,  # only watches can move partitions during the test
    )
    producer = AckedProducer(kafka_config, topic, range(PARTITIONS), rate=600)
    sampler = None
    try:
        with running_members() as members:
            for name in ("a", "b", "c"):
                members.append(Member(tmp_path, name, config))
            a, b, c = members
            wait_for(lambda: len(consumer_pids(zk)) == 3, 60, "three registrations")
            wait_for(lambda: sorted(Counter(owners(zk, topic).values()).values()) == [4, 4, 4], 60, "4/4/4")
            pids = consumer_pids(zk)
            ids_of = {pid: cid for cid, pid in pids.items()}
            wait_for(
                lambda: {d.pid for d in read_event_log(str(events))[0]} >= {a.pid, b.pid, c.pid},
                60,
                "deliveries by all three",
            )
            before = owners(zk, topic)
            leaver = ids_of[b.pid]
            handed = {p for p, o in before.items() if o == leaver}
            sampler = Sampler(lambda: owners(zk, topic), interval=0.02, name="owners")
            wait_for(lambda: len(sampler.samples) > 0, 10, "the first owners sample")

            signalled_wall = time.time()
            b.proc.send_signal(signal.SIGTERM)
            handoff = wait_for(
                lambda: (lambda o: all(o.get(p) not in (None, leaver) for p in handed))(owners(zk, topic)),
                30,
                "the leaver's partitions owned by the others",
                interval=0.02,
            )
            assert b.wait(60) == 0, b.log()[-3000:]
            print(f"graceful hand-off of {len(handed)} partitions: {handoff:.3f} s after SIGTERM")
            assert handoff <= HANDOFF_BOUND_S, f"hand-off took {handoff:.3f} s (bound {HANDOFF_BOUND_S} s)"

            stayers = {ids_of[a.pid], ids_of[c.pid]}
            wait_for(
                lambda: sorted(Counter(owners(zk, topic).values()).values()) == [6, 6]
                and set(owners(zk, topic).values()) == stayers,
                30,
                "6/6 over the two that stayed",
            )
            time.sleep(1.0)  # load goes on after the hand-off
            history = sampler.stop()
            acked = producer.stop()
            wait_delivered(lambda: delivered_ids(str(events)), acked)
            for m in (a, c):
                assert m.terminate(60) == 0, m.log()[-3000:]

            # Nothing but the leaver's partitions changed owner, and each moved once, directly.
            for p in range(PARTITIONS):
                seen = [o[p] for _, o in history if p in o]
                moves = [x for i, x in enumerate(seen) if i == 0 or seen[i - 1] != x]
                if p in handed:
                    assert len(moves) == 2 and moves[0] == leaver and moves[1] in stayers, (p, moves)
                else:
                    assert moves == [before[p]], (p, moves)

            deliveries, callbacks = read_event_log(str(events))
            report = delivery_report((d.id for d in deliveries), acked)
            assert report.exactly_once, str(report)
            assert len(acked) >= 600, f"only {len(acked)} records under load"
            # Callbacks since the signal: the leaver terminated exactly its partitions, once each;
            # the others terminated theirs only when they were stopped at the end.
            late = [cb for cb in callbacks if cb.at >= signalled_wall]
            assert sorted(cb.partition for cb in late if cb.kind == "T" and cb.pid == b.pid) == sorted(handed)
            assert {cb.partition for cb in late if cb.kind == "T" and cb.pid != b.pid} == set(range(PARTITIONS))
            assert [cb for cb in callbacks if cb.kind == "X"] == []
            for m in members:
                assert "Traceback" not in m.log(), m.log()[-3000:]
            print(f"{len(acked)} ids, each delivered once")
    finally:
        if sampler is not None:
            sampler.stop()
        producer.close()
