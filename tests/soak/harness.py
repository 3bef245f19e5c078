"""One soak run: a group of ``jetkafka run`` processes under load and a fault schedule.

The run, in order:

1. its own ZooKeeper and broker (:class:`~tests.soak.cluster.SoakCluster`), a topic of
   ``partitions`` partitions, ``members`` processes running the mode's processor
   (:mod:`tests.soak.modes`; with ``neighbours``, each runs a folder of channel files:
   :class:`~tests.soak.members.Folder`), and, in a dispatcher run, the HTTP subscriber they
   deliver to (:mod:`tests.soak.subscriber`);
2. the producer (:class:`~tests.soak.producer.SoakProducer`) writes unique ids at a steady rate
   (each acknowledgement recorded, with its time) while the schedule (:mod:`tests.soak.schedule`)
   injects faults (:mod:`tests.soak.faults`) and puts partitions under conditions and lifts them
   (:mod:`tests.soak.conditions`: poisoned, slow); processors fail on their own at ``raise_rate``. The
   soak's seeded schedule runs for ``duration_s`` and production goes on to ``events``; a
   fixed schedule (the guarantee matrix) injects each of its kinds once at ``rate`` events per
   second, and production stops ``tail_s`` after it;
3. the drain: every process thawed and resumed, every condition lifted (a poison cured by a
   reset past it), the run's file back in every member's folder, at least ``members`` running,
   the producer stopped, then the group is given ``drain_timeout_s`` to commit every partition
   to its end and to recover every recovery range;
4. every process is stopped with SIGTERM and ZooKeeper cleanly, so its log is complete;
   with ``commit_to_kafka`` (every mode's default), Kafka's copy of the group's offsets,
   polled ten times a second all along (:mod:`tests.soak.mirror_watch`), is read once more
   in between, once every member stopped;
5. the checker (:mod:`tests.soak.checker`) judges the history against the mode's guarantee
   (:mod:`tests.soak.guarantee`); ``report.json`` and ``report.txt`` are written to the run
   directory.

Everything the checker reads stays in the run directory (see :mod:`tests.soak.history`), so a
run can be judged again with ``python -m tests.soak.check RUN_DIR``.

Threads: the harness runs on one thread (it must be the one that started the servers);
the producer and the mirror watch have their own, and the subscriber answers on the HTTP
server's threads.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.soak.check import judge
from tests.soak.cluster import SoakCluster
from tests.soak.faults import Chaos, FaultTiming, Settings
from tests.soak.history import Fault, write_acks, write_faults
from tests.soak.members import Folder, MemberPool
from tests.soak.mirror_watch import MirrorWatch
from tests.soak.modes import ModeSettings, member_config, neighbour_config
from tests.soak.producer import SoakProducer
from tests.soak.report import Report
from tests.soak.schedule import FixedPlan, Plan
from tests.soak.subscriber import RecordingSubscriber

log = logging.getLogger("soak")

GROUP = "soak"
CHROOT = "/soak"


@dataclass(frozen=True)
class SoakOptions:
    seed: int
    mode: str = "batch"  # one of tests.soak.guarantee.MODES
    events: int = 1_000_000
    duration_s: float = 600.0
    partitions: int = 16
    members: int = 3
    max_members: int = 5
    min_members: int | None = None  # default: members
    session_timeout_s: float = 10.0
    raise_rate: float = 0.005
    drain_timeout_s: float = 300.0
    # A fixed schedule (the matrix): these kinds once each, ``gap_s`` apart, while the producer
    # writes ``rate`` events per second; production stops ``tail_s`` after the last fault
    # (``events`` and ``duration_s`` are then not used).
    schedule: tuple[str, ...] = ()
    gap_s: float = 1.5
    rate: int = 0
    tail_s: float = 3.0
    timing: FaultTiming = field(default_factory=FaultTiming)
    settings: ModeSettings = field(default_factory=ModeSettings)
    # The seeded schedule's condition steps (tests.soak.conditions), each at this fraction of
    # ``duration_s`` into the load, e.g. (("poison", 0.2), ("cure", 0.45)). A fixed schedule
    # names them in ``schedule``. Whatever is still held when the load ends is lifted then.
    conditions: tuple[tuple[str, float], ...] = ()
    # Faults that pick a member (or a partition to reset back) aim at the partition under a condition.
    aim: bool = False
    # Every member runs a folder of channel files (``jetkafka run DIR``): process.yaml, the run's
    # own file and these neighbours, channels of groups of their own on the same topic
    # (tests.soak.modes.neighbour_config); the faults of subscriptions need it.
    neighbours: tuple[str, ...] | None = None


def _drain(cluster: SoakCluster, topic: str, partitions: int, timeout: float) -> dict[str, Any]:
    """Wait until every partition's committed offset reached its high watermark and no
    recovery range is left."""
    deadline = time.monotonic() + timeout
    while True:
        marks = cluster.watermarks(topic, partitions)
        committed = cluster.group_view(CHROOT, GROUP, topic)["committed"]
        behind = {p: (committed.get(p), high) for p, (_low, high) in marks.items() if (committed.get(p) or 0) < high}
        recovering = cluster.recovery_remaining(CHROOT, GROUP, topic)
        if (not behind and not recovering) or time.monotonic() > deadline:
            return {
                "behind": {str(p): list(v) for p, v in behind.items()},
                "recovering": {str(p): n for p, n in recovering.items()},
                "watermarks": {str(p): list(v) for p, v in marks.items()},
            }
        time.sleep(1.0)


def _schedule(options: SoakOptions) -> Plan | FixedPlan:
    if options.schedule:
        return FixedPlan(options.seed, options.schedule, options.gap_s)
    return Plan(options.seed)


def _producer(options: SoakOptions, cluster: SoakCluster, topic: str) -> SoakProducer:
    if options.schedule:  # a fixed schedule: a steady rate until it is over
        rate, total = options.rate, 1 << 40
    else:
        rate, total = max(1, math.ceil(options.events * 1.02 / options.duration_s)), options.events
    return SoakProducer(cluster.kafka, topic, range(options.partitions), rate=rate, total=total, keys=options.settings.keys)


def run_soak(options: SoakOptions, run_dir: Path) -> Report:
    """Run the soak in ``run_dir`` (created) and return the checker's report."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    cluster = SoakCluster(run_dir)
    pool = None
    producer = None
    subscriber = None
    watch = None
    faults: list[Fault] = []
    info: dict[str, Any] = {
        **asdict(options), "topic": topic, "group": GROUP, "chroot": CHROOT, "started": started,
        "guarantee": options.settings.guarantee_params(options.mode, options.session_timeout_s),
    }
    try:
        cluster.create_topic(topic, options.partitions)
        if options.mode == "dispatcher":
            subscriber = RecordingSubscriber(run_dir / "subscriber.log", options.seed, options.raise_rate)
        config = member_config(
            options.mode, seed=options.seed, raise_rate=options.raise_rate, session_timeout_s=options.session_timeout_s,
            zk=f"{cluster.zk_address}{CHROOT}", kafka=cluster.kafka, topic=topic, group=GROUP, run_dir=run_dir,
            settings=options.settings, subscriber_url=subscriber.url if subscriber is not None else None,
        )
        if options.settings.commit_to_kafka:  # the group id the members mirror to, as jetkafka names it
            mirror_group = str(config["kafka"].get("group.id") or f"jetkafka.{GROUP}")
            watch = MirrorWatch(cluster.kafka, mirror_group, topic, options.partitions, run_dir / "mirror.tsv")
            watch.start()
        operator = run_dir / "operator.yaml"
        operator.write_text(yaml.safe_dump(config))
        folder = neighbour = None
        if options.neighbours is not None:
            def neighbour_of(name: str) -> dict[str, Any]:
                return neighbour_config(name, kafka=cluster.kafka, topic=topic, run_dir=run_dir)

            folder = Folder(
                process={name: config[name] for name in ("zookeeper", "logging")},
                neighbours={f"neighbour-{name}.yaml": neighbour_of(name) for name in options.neighbours},
            )
            neighbour = neighbour_of("b")
        pool = MemberPool(run_dir, config, folder)
        for _ in range(options.members):
            pool.start()
        plan = _schedule(options)
        settings = Settings(
            topic, options.partitions, GROUP, CHROOT, options.session_timeout_s,
            min_members=options.min_members or options.members, max_members=options.max_members,
            join_timeout_s=180.0 if options.mode == "spark" else 90.0, timing=options.timing,
            conditions_path=run_dir / "conditions.json", aim=options.aim, neighbour=neighbour,
        )
        chaos = Chaos(cluster, pool, settings, plan.choices, operator)
        warm = time.monotonic()
        while len(cluster.group_view(CHROOT, GROUP, topic)["pids"]) < options.members:
            if time.monotonic() - warm > 300:
                raise AssertionError(f"the first {options.members} members did not register within 300 s")
            time.sleep(0.5)
        producer = _producer(options, cluster, topic)
        load_started = time.monotonic()
        conditions = sorted(options.conditions, key=lambda c: c[1])
        for step in plan.steps():
            if not options.schedule and time.monotonic() - load_started + step.gap_s >= options.duration_s:
                break
            time.sleep(step.gap_s)
            while conditions and time.monotonic() - load_started >= conditions[0][1] * options.duration_s:
                faults.append(chaos.run(conditions.pop(0)[0]))
            if chaos.needs_a_member(step.kind):  # a join first, so that this kind runs too
                faults.append(chaos.run("join"))
                time.sleep(step.gap_s)
            faults.append(chaos.run(step.kind))
            write_faults(run_dir / "faults.json", faults)
        if options.schedule:
            time.sleep(options.tail_s)
        else:
            # Production goes on to its target count, however long the last fault took.
            while not producer.done() and producer.alive() and time.monotonic() - load_started < options.duration_s * 2:
                time.sleep(0.5)
        chaos.thaw_everything()
        for kind in (*chaos.conditions.lifts_due(), *chaos.restores_due()):
            faults.append(chaos.run(kind))
        while len(pool.alive()) < options.members:
            faults.append(chaos.run("join"))
        acked, info["producer"] = producer.stop()
        info["load_s"] = round(time.monotonic() - load_started, 1)
        write_acks(run_dir / "acks.tsv", acked, producer.acked_at())
        write_faults(run_dir / "faults.json", faults)
        log.info("load done: %d acknowledged; draining", len(acked))
        info["drain"] = _drain(cluster, topic, options.partitions, options.drain_timeout_s)
        info["final_view"] = {k: {str(a): b for a, b in v.items()} for k, v in cluster.group_view(CHROOT, GROUP, topic).items()}
        info["processes"] = {m.name: m.pid for m in pool.members}
        info["exit_codes"] = pool.terminate_all()
        if watch is not None:
            info["mirror"] = watch.final()
    finally:
        if watch is not None:
            watch.close()
        if producer is not None:
            producer.close()  # after a failure above; a no-op after stop()
        if pool is not None:
            pool.close()
        if subscriber is not None:
            info["subscriber_requests"] = subscriber.requests()
            subscriber.close()
        info["wall_s"] = round(time.time() - started, 1)
        (run_dir / "run.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
        cluster.stop()
    return judge(run_dir)
