"""The hand-off benchmark's apparatus: a pair of instances in child processes, and what they record.

- :class:`SteadyProducer`: a steady produce from a thread while the trials run.
- :class:`RecordLog`: follows the file every instance appends ``pid partition offset time`` to
  (and consumer-group members their assignments), and finds the first event of each partition
  processed by another instance after a signal.
- :class:`Group`: instances of one kind (:class:`JetkafkaGroup`: ``jetkafka run`` processes;
  :class:`ConsumerGroup`: confluent-kafka group members), started, balanced, signalled and
  replaced. On Linux every child dies with the benchmark's process, even when that one is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jetkafka.bench._stack import BenchCluster
from jetkafka.devstack._lifetime import die_with_parent

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
# A partition counts as being processed by its owner when the owner's latest batch is this recent.
PROCESSING_WINDOW_S = 3.0
TRIAL_TIMEOUT_S = 90.0
BALANCE_TIMEOUT_S = 90.0


class SteadyProducer:
    """``rate`` events/s round-robin over the partitions, from a thread, until stopped."""

    def __init__(self, kafka: dict[str, Any], topic: str, partitions: int, rate: int) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({**kafka, "linger.ms": 1, "logger": log})
        self._topic, self._partitions, self._rate = topic, partitions, rate
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="jetkafka-bench-producer", daemon=True)
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
            if (
                watch is not None
                and partition in watch
                and not watch[partition]
                and pid != self._watch_not_pid
                and at >= self._watch_since
            ):
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
        out = open(log_path, "wb")  # noqa: SIM115 - the child's log, closed by Instance.reap()
        proc = subprocess.Popen(
            self.command(self._count),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
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
            "class": "jetkafka.bench._processors:HandoffRecorder",
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
        except Exception:  # noqa: BLE001 - a probe: ZooKeeper down or no owners node both mean no owners yet
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
            "jetkafka.bench._group_member",
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
