"""Subscriptions: N channels in one ``jetkafka run DIR`` process against N ``jetkafka run FILE`` processes.

N channel files (distinct groups, one topic of 8 partitions, threads 2, auto_offset_reset
earliest, the no-op :class:`~jetkafka.bench._processors.CountingNoOp`, otherwise the defaults)
are run two ways:

- *one process*: ``jetkafka run DIR`` on a folder of the N files;
- *N processes*: ``jetkafka run FILE`` for each of N files with the same content.

Each setup gets a new, empty topic and new groups. For each:

- *start*: from the launch until every group owns all its partitions
  (``/consumers/<group>/owners``), and the CPU used meanwhile;
- *backlog*: then ``events`` values of 200 B are produced; from the start of producing until
  every group's committed offsets (``/consumers/<group>/offsets``) reach the partitions' ends.
  CPU from started to committed, per 1,000 events processed (N × events; what the processes
  spend idle meanwhile included);
- then, after ``steady_s`` idle: summed RSS and PSS, threads, ZooKeeper sessions (distinct
  ephemeral owners of the groups' ``ids`` nodes) and connections (``mntr``'s
  ``zk_num_alive_connections`` less its value before the launch, and the processes'
  established TCP connections to ZooKeeper), TCP connections to the brokers, and the CPU of
  that idle time; the peak of the summed RSS is sampled every 0.2 s from the launch;
- *stop*: from SIGTERM to every process until the last one exited.

CPU is user + system of the processes and their waited-for children; memory and CPU are read
with psutil by the benchmark's process, which also polls ZooKeeper every 0.2 s: on a small
machine that polling takes CPU from the setup measured.

With ``rounds`` > 1 the setups alternate (one process first in odd rounds) and each figure is
the median of the rounds. A process that exits early, or a group that does not get its
partitions or commit its backlog in time, ends the part with the cause (the error the
process logged last); every process of the part is stopped, on Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jetkafka.bench._process_probe import ProcessSet
from jetkafka.bench._stack import BenchCluster
from jetkafka.devstack._lifetime import die_with_parent

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
EVENT_BYTES = 200
THREADS = 2
START_TIMEOUT_S = 300.0
BACKLOG_TIMEOUT_S = 900.0
STALL_S = 120.0  # no committed progress for this long: give up
STOP_TIMEOUT_S = 120.0
SAMPLE_S = 0.2
ONE, MANY = "one_process", "processes"


@dataclass
class Child:
    """A ``jetkafka run`` process of the part and its log."""

    label: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: Any = field(repr=False, default=None)

    def exited(self) -> str | None:
        """Why this process is gone (its status and last log line), or None while it runs."""
        if self.proc.poll() is None:
            return None
        return f"{self.label} exited with status {self.proc.returncode}: {last_error(self.log_path)} (log: {self.log_path})"

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def last_error(path: Path) -> str:
    """The last error a process logged, with the lines that follow it (its hint), on one line;
    else its last line."""
    try:
        lines = [ln.strip() for ln in path.read_bytes()[-8000:].decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    if not lines:
        return "nothing logged"
    errors = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    if not errors:
        return lines[-1]
    return " ".join(lines[errors[-1]:errors[-1] + 3])


def launch(label: str, target: Path, log_path: Path) -> Child:
    out = open(log_path, "wb")  # noqa: SIM115 - the child's log, closed by Child.close_log()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(target), "--no-watch", "--log-level", "WARNING"],
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
    )
    return Child(label, proc, log_path, out)


def kill_all(children: list[Child]) -> None:
    """Stop whatever still runs (SIGTERM, then SIGKILL after 10 s) and close the logs."""
    for child in children:
        if child.proc.poll() is None:
            with contextlib.suppress(OSError):
                child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for child in children:
        try:
            child.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait(10)
        child.close_log()


class GroupsView:
    """The groups' owners, committed offsets and sessions in ZooKeeper."""

    def __init__(self, cluster: BenchCluster, groups: list[str], topic: str, ends: dict[int, int]) -> None:
        self._zk = cluster.zk_client()
        self.groups, self.topic, self.ends = groups, topic, ends

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

    def unowned(self) -> list[str]:
        """The groups that do not own every partition yet."""
        asks = [(g, self._zk.get_children_async(f"/consumers/{g}/owners/{self.topic}")) for g in self.groups]
        missing = []
        for group, ask in asks:
            try:
                owned = len(ask.get(timeout=10))
            except Exception:  # noqa: BLE001 - a probe: no owners node yet means none owned
                owned = 0
            if owned < PARTITIONS:
                missing.append(group)
        return missing

    def committed(self) -> tuple[int, list[str]]:
        """Events committed over every group, and the groups not at the end yet."""
        asks = [
            (g, p, self._zk.get_async(f"/consumers/{g}/offsets/{self.topic}/{p}"))
            for g in self.groups
            for p in range(PARTITIONS)
        ]
        total, behind = 0, set()
        for group, p, ask in asks:
            try:
                offset = int(ask.get(timeout=10)[0].decode() or 0)
            except Exception:  # noqa: BLE001 - a probe: an offset not written yet counts as 0
                offset = 0
            total += min(offset, self.ends[p])
            if offset < self.ends[p]:
                behind.add(group)
        return total, sorted(behind)

    def sessions(self) -> int:
        """Distinct ZooKeeper sessions holding the groups' member (``ids``) nodes."""
        owners = set()
        for group in self.groups:
            path = f"/consumers/{group}/ids"
            with contextlib.suppress(Exception):
                for name in self._zk.get_children(path):
                    stat = self._zk.exists(f"{path}/{name}")
                    if stat is not None and stat.ephemeralOwner:
                        owners.add(stat.ephemeralOwner)
        return len(owners)


def _wait(children: list[Child], probe: ProcessSet, done: Callable[[], bool], timeout: float, what: str,
          detail: Callable[[], str], progress_of: Callable[[], int] | None = None) -> float:
    """Sample memory and poll ``done`` until true; returns the time it became true.

    Raises RuntimeError naming the first process that exited, or what was not reached in time.
    """
    started = time.monotonic()
    progressed_at, last = started, -1
    while True:
        probe.rss()
        for child in children:
            why = child.exited()
            if why:
                raise RuntimeError(f"{why}, before {what}")
        if done():
            return time.perf_counter()
        now = time.monotonic()
        if progress_of is not None:
            value = progress_of()
            if value != last:
                progressed_at, last = now, value
            elif now - progressed_at > STALL_S:
                raise RuntimeError(f"no progress for {STALL_S:.0f} s before {what} ({value:,} events committed); "
                                   f"{detail()}")
        if now - started > timeout:
            raise RuntimeError(f"not {what} within {timeout:.0f} s; {detail()}")
        time.sleep(SAMPLE_S)


def _zk_connections(cluster: BenchCluster) -> int | None:
    counters = cluster.zk_counters()
    return None if counters is None else counters.get("zk_num_alive_connections")


def _write_files(configs: list[dict[str, Any]], workdir: Path) -> list[Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, config in enumerate(configs, 1):
        path = workdir / f"sub-{i:02d}.yaml"
        path.write_text(yaml.safe_dump(config))
        paths.append(path)
    return paths


def _stop(children: list[Child]) -> tuple[float, list[str]]:
    """SIGTERM to every process at once; seconds until the last exited, and the unclean exits."""
    stopping = time.perf_counter()
    for child in children:
        child.proc.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.proc.wait(max(0.1, STOP_TIMEOUT_S - (time.perf_counter() - stopping)))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{child.label} did not exit within {STOP_TIMEOUT_S:.0f} s of SIGTERM "
                               f"(log: {child.log_path})") from None
    seconds = time.perf_counter() - stopping
    unclean = [f"{c.label}: status {c.proc.returncode}, {last_error(c.log_path)}" for c in children
               if c.proc.returncode != 0]
    return seconds, unclean


def measure_setup(cluster: BenchCluster, setup: str, configs: list[dict[str, Any]], workdir: Path,
                  topic: str, events: int, steady_s: float) -> dict[str, Any]:
    """Launch one setup on the empty ``topic``, wait for its start, produce ``events`` and wait
    until every group committed them, measure it idle, stop it."""
    n = len(configs)
    paths = _write_files(configs, workdir)
    view = GroupsView(cluster, [c["channel"]["group"] for c in configs], topic, {})
    zk_ports = {int(h.rpartition(":")[2]) for h in cluster.zk_hosts.split(",")}
    broker_ports = broker_ports_of(cluster)
    zk_before = _zk_connections(cluster)
    children: list[Child] = []

    def detail(groups: list[str], state: str) -> str:
        shown = ", ".join(groups[:3]) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")
        logged = [f"{c.label}: {last_error(c.log_path)}" for c in children if c.log_path.stat().st_size]
        return f"{state}: {shown or '-'}; logged: {'; '.join(logged[:3]) or 'nothing'}"

    try:
        launched = time.perf_counter()
        if setup == ONE:
            children.append(launch("jetkafka run DIR", workdir, workdir / "run-dir.log"))
        else:
            for path in paths:
                children.append(launch(f"jetkafka run {path.name}", path, path.with_suffix(".log")))
        probe = ProcessSet([c.proc.pid for c in children])
        ready = _wait(children, probe, lambda: not view.unowned(), START_TIMEOUT_S,
                      "every group owned its partitions", lambda: detail(view.unowned(), "groups short of partitions"))
        cpu_ready = probe.cpu_seconds()
        filling = time.perf_counter()
        fill_s = cluster.fill(topic, events, EVENT_BYTES, PARTITIONS)
        view.ends = cluster.high_watermarks(topic, PARTITIONS)
        processed = n * sum(view.ends.values())
        seen = [0]

        def all_committed() -> bool:
            seen[0], behind = view.committed()
            return not behind

        done = _wait(children, probe, all_committed, BACKLOG_TIMEOUT_S, "every group committed the backlog",
                     lambda: detail(view.committed()[1], "groups behind"), progress_of=lambda: seen[0])
        cpu_done = probe.cpu_seconds()
        rss_at_done = probe.rss()
        idle_from = time.monotonic()
        while time.monotonic() - idle_from < steady_s:
            probe.rss()
            time.sleep(SAMPLE_S)
        cpu_idle = probe.cpu_seconds() - cpu_done
        zk_after = _zk_connections(cluster)
        result: dict[str, Any] = {
            "processes": len(children),
            "subscriptions": n,
            "start_s": ready - launched,
            "backlog_s": done - filling,
            "produce_s": fill_s,
            "events": processed,
            "cpu_seconds_to_start": cpu_ready,
            "cpu_seconds_backlog": cpu_done - cpu_ready,
            "cpu_seconds_per_1000_events": (cpu_done - cpu_ready) / processed * 1000,
            "idle_cpu_percent": cpu_idle / steady_s * 100,
            "rss_bytes": probe.rss(),
            "rss_at_backlog_end_bytes": rss_at_done,
            "rss_peak_bytes": probe.peak_rss,
            "pss_bytes": probe.pss(),
            "threads": probe.threads(),
            "zk_sessions": view.sessions(),
            "zk_connections": None if zk_after is None or zk_before is None else zk_after - zk_before,
            "zk_tcp_connections": probe.connections(zk_ports),
            "broker_tcp_connections": probe.connections(broker_ports),
        }
        for child in children:
            why = child.exited()
            if why:
                raise RuntimeError(f"{why}, while measured idle")
        result["stop_s"], unclean = _stop(children)
        if unclean:
            result["unclean_exits"] = unclean
        return result
    finally:
        kill_all(children)
        view.close()


def broker_ports_of(cluster: BenchCluster) -> set[int]:
    """The ports of the cluster's brokers (metadata), and of the bootstrap servers."""
    ports = {int(b.rpartition(":")[2]) for b in str(cluster.kafka["bootstrap.servers"]).split(",")}
    with contextlib.suppress(Exception):
        ports |= {int(b.port) for b in cluster.admin.list_topics(timeout=10).brokers.values()}
    return ports


FIGURES = (
    "start_s", "backlog_s", "produce_s", "cpu_seconds_to_start", "cpu_seconds_backlog", "cpu_seconds_per_1000_events",
    "idle_cpu_percent", "rss_bytes", "rss_at_backlog_end_bytes", "rss_peak_bytes", "pss_bytes", "threads",
    "zk_sessions", "zk_connections", "zk_tcp_connections", "broker_tcp_connections", "stop_s",
)


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"processes": rounds[0]["processes"], "subscriptions": rounds[0]["subscriptions"],
                           "events": rounds[0]["events"]}
    for key in FIGURES:
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    unclean = [u for r in rounds for u in r.get("unclean_exits", [])]
    if unclean:
        out["unclean_exits"] = unclean
    if len(rounds) > 1:
        out["rounds"] = rounds
    return out


def run(cluster: BenchCluster, subscriptions: int, events: int, rounds: int, steady_s: float,
        progress: Any) -> dict[str, Any]:
    workdir = cluster.workdir / "subscriptions"
    result: dict[str, Any] = {
        "settings": {
            "subscriptions": subscriptions,
            "events": events,
            "event_bytes": EVENT_BYTES,
            "partitions": PARTITIONS,
            "threads": THREADS,
            "rounds": rounds,
            "steady_s": steady_s,
            "processor": "jetkafka.bench._processors:CountingNoOp",
        }
    }
    measured: dict[str, list[dict[str, Any]]] = {ONE: [], MANY: []}
    for r in range(rounds):
        order = (ONE, MANY) if r % 2 == 0 else (MANY, ONE)
        for setup in order:
            short = "one" if setup == ONE else "many"
            what = "one process" if setup == ONE else f"{subscriptions} processes"
            progress.note(f"subscriptions: {subscriptions} in {what} (round {r + 1} of {rounds})")
            topic = cluster.create_topic(f"subs-{r + 1}-{short}", PARTITIONS)
            configs = []
            for i in range(1, subscriptions + 1):
                group = cluster.group(f"subs-{r + 1}-{short}-{i:02d}")
                config = cluster.channel_config(group, topic, threads=THREADS, auto_offset_reset="earliest")
                config["processor"] = {"class": "jetkafka.bench._processors:CountingNoOp"}
                configs.append(config)
            try:
                measured[setup].append(
                    measure_setup(cluster, setup, configs, workdir / f"round-{r + 1}-{setup}", topic, events, steady_s)
                )
            except Exception as exc:
                log.exception("subscriptions: %s failed", what)
                result[setup] = {"error": str(exc)}
                return result
            finally:
                progress.advance()
    for setup in (ONE, MANY):
        result[setup] = _median(measured[setup])
    return result


def steps(rounds: int) -> int:
    return 2 * rounds
