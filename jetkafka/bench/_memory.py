"""Memory: peak RSS of a ``jetkafka run`` process consuming a backlog with the default buffers.

A topic of 8 partitions is filled with ``events`` values of 200 B; then a ``jetkafka run``
child with a no-op processor and default settings consumes all of it. Its RSS is sampled every
50 ms (psutil) and the child reports its own RSS when its processor is built and its peak
(VmHWM) when it stops, after every offset reached the end. The same backlog read by a
plain confluent-kafka consumer (librdkafka's defaults) in a child process is the baseline.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from jetkafka.bench._stack import BenchCluster
from jetkafka.devstack._lifetime import die_with_parent

log = logging.getLogger("jetkafka.bench")

PARTITIONS = 8
EVENT_BYTES = 200
TIMEOUT_S = 1800.0
STALL_S = 120.0  # no committed progress for this long: give up
# The dev stack's broker answers a fetch with everything from the fetch offset to the end of
# each partition, ignoring fetch size limits, and librdkafka refuses a response larger than
# receive.message.max.bytes (at most 2**31 - 1, which the dev stack's client configuration
# sets). 5M values of 200 B make a 1.05 GB response; past about 9M the response would not fit.
LOCAL_MAX_EVENTS = 9_000_000


def _read(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            out[key] = float(value)
    return out


class Sampler:
    def __init__(self, pid: int) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self.peak = 0

    def sample(self) -> None:
        try:
            self.peak = max(self.peak, int(self._proc.memory_info().rss))
        except Exception:  # noqa: BLE001 - exited between two samples
            pass


def jetkafka_child(cluster: BenchCluster, topic: str, events: int, workdir: Path) -> dict[str, Any]:
    group = cluster.group("memory")
    probe = workdir / "jetkafka-rss.txt"
    config = cluster.channel_config(group, topic)
    config["processor"] = {"class": "jetkafka.bench._processors:MemoryProbe", "options": {"path": str(probe)}}
    config_path = workdir / "memory.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = open(workdir / "memory-child.log", "wb")  # noqa: SIM115 - the child's log, closed once it stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(config_path), "--no-watch", "--log-level", "WARNING"],
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
    )
    sampler = Sampler(proc.pid)
    zk = cluster.zk_client()
    started = time.perf_counter()
    try:
        offsets_path = f"/consumers/{group}/offsets/{topic}"
        next_check = 0.0
        progress_at, last_total = time.perf_counter(), -1
        while True:
            sampler.sample()
            if proc.poll() is not None:
                raise RuntimeError(f"jetkafka run exited with status {proc.returncode}; see {out.name}")
            now = time.perf_counter()
            if now >= next_check:
                next_check = now + 0.5
                total = 0
                for p in range(PARTITIONS):
                    try:
                        data, _ = zk.get(f"{offsets_path}/{p}")
                        total += int(data.decode() or 0)
                    except Exception:  # noqa: BLE001 - a probe: an offset not readable now counts as 0
                        pass
                if total >= events:
                    break
                if total != last_total:
                    progress_at, last_total = now, total
                elif now - progress_at > STALL_S:
                    raise RuntimeError(
                        f"no progress for {STALL_S:.0f} s at {total:,} of {events:,} events; see {out.name}"
                    )
            if now - started > TIMEOUT_S:
                raise RuntimeError(f"backlog not consumed within {TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
        zk.stop()
        zk.close()
    reported = _read(probe)
    peak = max(sampler.peak, int(reported.get("peak", 0)))
    return {
        "rss_start_bytes": int(reported.get("start", 0)),
        "rss_peak_bytes": peak,
        "rss_peak_sampled_bytes": sampler.peak,
        "seconds_to_consume": seconds,
    }


def plain_child(cluster: BenchCluster, topic: str, events: int, workdir: Path) -> dict[str, Any]:
    kafka_path = workdir / "plain-kafka.json"
    kafka_path.write_text(json.dumps(cluster.kafka))
    report = workdir / "plain-rss.txt"
    out = open(workdir / "plain-child.log", "wb")  # noqa: SIM115 - the child's log, closed once it stopped
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jetkafka.bench._plain_child",
            "--kafka",
            str(kafka_path),
            "--topic",
            topic,
            "--partitions",
            str(PARTITIONS),
            "--events",
            str(events),
            "--out",
            str(report),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
    )
    sampler = Sampler(proc.pid)
    started = time.perf_counter()
    try:
        while proc.poll() is None:
            sampler.sample()
            if time.perf_counter() - started > TIMEOUT_S:
                raise RuntimeError(f"backlog not consumed within {TIMEOUT_S:.0f} s")
            if time.perf_counter() - started > STALL_S and _failing(Path(out.name)):
                raise RuntimeError(f"the consumer keeps failing to fetch; see {out.name}")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
    if proc.returncode != 0:
        raise RuntimeError(f"plain consumer exited with status {proc.returncode}; see {out.name}")
    reported = _read(report)
    return {
        "rss_start_bytes": int(reported.get("start", 0)),
        "rss_peak_bytes": max(sampler.peak, int(reported.get("peak", 0))),
        "rss_peak_sampled_bytes": sampler.peak,
        "seconds_to_consume": reported.get("done"),
    }


def _failing(log_path: Path) -> bool:
    """librdkafka keeps logging that it cannot receive (e.g. a response over its size limit)."""
    try:
        tail = log_path.read_bytes()[-4000:].decode(errors="replace")
    except OSError:
        return False
    return tail.count("Receive failed") >= 3


def run(cluster: BenchCluster, events: int, progress: Any) -> dict[str, Any]:
    from jetkafka.bench._throughput import channel_defaults

    asked = events
    capped = None
    if cluster.local and events > LOCAL_MAX_EVENTS:
        events = LOCAL_MAX_EVENTS
        capped = (
            f"{asked:,} asked, {events:,} run: the dev stack's broker ignores fetch size limits and answers "
            f"with the whole backlog ({asked:,} x {EVENT_BYTES} B > librdkafka's 2,147,483,647-byte response limit)"
        )
    workdir = cluster.workdir / "memory"
    workdir.mkdir(parents=True, exist_ok=True)
    topic = cluster.create_topic("memory", PARTITIONS)
    progress.note(f"memory: producing {events:,} events of {EVENT_BYTES} B")
    fill_s = cluster.fill(topic, events, EVENT_BYTES, PARTITIONS)
    progress.advance()
    progress.note("memory: jetkafka run consuming the backlog")
    result: dict[str, Any] = {
        "settings": {
            "events": events,
            "event_bytes": EVENT_BYTES,
            "partitions": PARTITIONS,
            "fill_seconds": fill_s,
            "channel_defaults": channel_defaults(),
            "librdkafka": "defaults (queued.max.messages.kbytes, fetch sizes); queued.min.messages: the channel's 10,000 "
            "(the plain consumer: librdkafka's 100,000)",
            "rss": "start: when the processor is built (after imports and configuration); "
            "peak: max of the process's VmHWM and 50 ms psutil samples",
        }
    }
    if capped:
        result["settings"]["capped"] = capped
    try:
        result["jetkafka"] = jetkafka_child(cluster, topic, events, workdir)
    except Exception as exc:
        log.exception("memory: jetkafka failed")
        result["jetkafka"] = {"error": str(exc)}
    progress.advance()
    progress.note("memory: plain confluent-kafka consumer")
    try:
        result["plain"] = plain_child(cluster, topic, events, workdir)
    except Exception as exc:
        log.exception("memory: plain consumer failed")
        result["plain"] = {"error": str(exc)}
    progress.advance()
    return result


def steps() -> int:
    return 3
