"""Judge a soak run directory: ``python -m tests.soak.check RUN_DIR`` (exit 1 on any violation).

Loads what the run left (:mod:`tests.soak.history`), replays ZooKeeper's transaction log
(:mod:`tests.soak.fencing`), runs :func:`tests.soak.checker.check`, and writes ``report.json``
and ``report.txt`` next to the data. In a Spark run the deliveries judged are the rows of the
Parquet output: each row is placed at the time and process of the last write of its slice
(``S`` lines), which is the write that produced the row the output holds. In a dispatcher run
they are the requests the subscriber answered 2xx (``subscriber.log``), each placed in the hold
whose fencing token it carried; the requests it refused on purpose are the run's injected
failures. The guarantee judged against is the mode's, with the parameters the run recorded. A
run with ``commit_to_kafka`` has its offset mirror judged too (:mod:`tests.soak.mirror`).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tests.soak.checker import check
from tests.soak.fencing import ZooKeeperHistory, replay
from tests.soak.guarantee import guarantee_for
from tests.soak.history import (
    Callback,
    Delivery,
    read_ack_times,
    read_acks,
    read_events,
    read_faults,
    read_mirror,
    read_output_rows,
    read_requests,
)
from tests.soak.mirror import judge_mirror
from tests.soak.report import Report, format_table
from tests.support.zk_txnlog import read_txn_logs


def _output_deliveries(run_dir: Path, slices: list) -> list[Delivery]:
    last_write: dict[tuple[int, int], tuple[float, int]] = {}
    for s in slices:
        key = (s.batch_id, s.partition)
        if key not in last_write or s.at > last_write[key][0]:
            last_write[key] = (s.at, s.pid)
    out = []
    for seq, (ident, batch_id, topic, partition, offset) in enumerate(read_output_rows(run_dir / "output")):
        at, pid = last_write.get((batch_id, partition), (0.0, -1))
        out.append(Delivery(pid, at, topic, partition, offset, ident, seq))
    return out


# The last line of a traceback: a dotted exception name (kazoo.exceptions.ConnectionLoss) or a
# builtin one (KeyError), then its message.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?::|$)|^[A-Z]\w*(?:Error|Exception)(?::|$)")


def scan_member_logs(run_dir: Path) -> list[str]:
    """Errors in the members' logs that no injected fault explains: each exception kind, counted.

    Each traceback is named by its exception and by the line that announced it (a log record or
    "Exception in thread ..."); the soak's own injected failures and poisoned records are left out. Tracebacks of
    two threads may interleave in a log: a traceback ends at the first exception line.
    """
    found: dict[str, list[str]] = {}
    for log in sorted(run_dir.glob("m*.log"), key=lambda p: int(p.stem[1:]) if p.stem[1:].isdigit() else 0):
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("Traceback"):
                continue
            exception = next((x.strip() for x in lines[i + 1 : i + 200] if _EXCEPTION_LINE.match(x)), "?")
            if "InjectedFailure" in exception or "PoisonedRecord" in exception:
                continue
            announced = lines[i - 1].split("] ", 1)[-1] if i else ""
            if "Exception in thread" in announced or announced.endswith("):"):
                announced = "Exception in thread " + announced.rsplit("Exception in thread", 1)[-1].strip()
            announced = re.sub(r"Thread-\d+", "Thread-N", announced)
            name = exception.split(":", 1)[0]
            found.setdefault(f"{name} ({announced[:90]})", []).append(f"{log.name}:{i + 1}")
    return [f"{len(where)} x {what}, first at {where[0]}" for what, where in sorted(found.items(), key=lambda kv: -len(kv[1]))]


def _requests_as_deliveries(run_dir: Path, zk: ZooKeeperHistory) -> tuple[list[Delivery], list[Callback]]:
    """A dispatcher run's subscriber log as deliveries (2xx answers) and injected failures (the
    refused first attempts), each placed in its process by the fencing token it carried."""
    pids: dict[tuple[str, int, int | None], int] = {}
    for h in zk.holds:
        session = zk.sessions.get(h.session)
        pids[(h.topic, h.partition, h.epoch)] = session.pid if session is not None and session.pid is not None else -1
    deliveries, failures = [], []
    for r in read_requests(run_dir / "subscriber.log"):
        pid = pids.get((r.topic, r.partition, r.epoch), -1)
        if 200 <= r.status < 300:
            deliveries.append(Delivery(pid, r.at, r.topic, r.partition, r.offset, r.id, r.seq, epoch=r.epoch))
        else:
            failures.append(Callback("R", pid, r.at, r.topic, r.partition, str(r.offset), r.seq, 1))
    return deliveries, failures


# One log line's level and message: "2026-11-25 13:43:11,976 ERROR   logger [thread] message".
_LOG_LINE = re.compile(r"^\S+ \S+ (ERROR|CRITICAL)\s+(\S+) \[[^\]]*\] (.*)$")
FLOOD = 500


def log_floods(run_dir: Path, at_least: int = FLOOD) -> list[str]:
    """ERROR lines a member logged ``at_least`` times over (numbers masked): a loop that logs on
    every turn instead of once, whatever it is looping on."""
    found = []
    for log in sorted(run_dir.glob("m*.log")):
        counts: dict[str, int] = {}
        with open(log, errors="replace") as f:
            for line in f:
                m = _LOG_LINE.match(line)
                if m:
                    key = f"{m[1]} {m[2]}: " + re.sub(r"\d+", "N", m[3])[:160]
                    counts[key] = counts.get(key, 0) + 1
        found += [f"{log.name}: {n} x {key}" for key, n in counts.items() if n >= at_least]
    return found


_ZK_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3}) ")


def zookeeper_hangs(run_dir: Path, session_timeout_s: float | None = None) -> list[float]:
    """When the ZooKeeper server, starting, let a client's session expire without a chance, by
    its log; one time per session it may have expired so (each explains one expiry within a
    session timeout and a little after it: :meth:`Timeline._expired_by_server`). Two ways:

    * it failed to close a connection it refused: a client that connects while the server
      loads its data is refused ("ZooKeeperServer not running"); the close then throws (a
      NullPointerException: no database yet) and leaves the connection open and unanswered,
      so the client waits its whole connect timeout (the session timeout, in kazoo) on it;
    * its start stalled: the session tracker runs from the moment the sessions are restored,
      before the server serves, so a start that takes longer than the session timeout (a
      stalled JVM on a loaded machine) expires every restored session less than a session
      timeout after the server began serving (its ``ContainerManager`` line ends the start),
      before any client could reconnect. Counted with ``session_timeout_s`` only.
    """
    try:
        lines = (run_dir / "stack" / "zookeeper" / "zookeeper.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    hangs = []
    serving: float | None = None
    for line, after in pairwise([*lines, ""]):  # every line, with the one after it
        m = _ZK_LINE.match(line)
        if not m:
            continue
        at = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S,%f").timestamp()
        if "WorkerService: Unexpected exception" in line and "NullPointerException" in after and "zkDb" in after:
            hangs.append(at)
        elif "ContainerManager: Using" in line:
            serving = at
        elif (
            session_timeout_s is not None
            and serving is not None
            and "Expiring session" in line
            and at - serving < session_timeout_s
        ):
            hangs.append(at - session_timeout_s)  # the window of one session timeout ends at it
    return hangs


_PAUSED = re.compile(r"^(\S+ \S+) INFO\s+jetkafka\.channel \[[^\]]*\] paused all partitions$")


def paused_windows(run_dir: Path, zk: ZooKeeperHistory, processes: dict[str, int]) -> dict[int, list[tuple[float, float]]]:
    """Per process: when it applied each pause (its log's "paused all partitions") and when the
    marker that paused it (the group's, or its own consumer id's) was removed."""
    consumer_ids: dict[int, set[str]] = {}
    for s in zk.sessions.values():
        if s.pid is not None and s.consumer_id is not None:
            consumer_ids.setdefault(s.pid, set()).add(s.consumer_id)
    windows: dict[int, list[tuple[float, float]]] = {}
    for name, pid in processes.items():
        try:
            lines = (run_dir / f"{name}.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            continue
        mine = {"_all", *consumer_ids.get(pid, ())}
        for line in lines:
            m = _PAUSED.match(line)
            if not m:
                continue
            at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            ends = [p.removed for p in zk.pauses if p.who in mine and p.removed is not None and p.created <= at < p.removed]
            if ends:
                windows.setdefault(pid, []).append((at, min(ends)))
    return windows


def judge(run_dir: Path) -> Report:
    info = json.loads((run_dir / "run.json").read_text())
    events = read_events(run_dir / "events.log")
    zk = replay(read_txn_logs(run_dir / "stack" / "zookeeper" / "data"), info["group"])
    callbacks = events.callbacks
    if info["mode"] == "spark":
        deliveries = _output_deliveries(run_dir, events.slices)
    elif info["mode"] == "dispatcher":
        deliveries, failures = _requests_as_deliveries(run_dir, zk)
        callbacks = callbacks + failures
    else:
        deliveries = events.deliveries
    session_timeout_s = float(info["session_timeout_s"])
    report = check(
        mode=info["mode"],
        topic=info["topic"],
        acked=read_acks(run_dir / "acks.tsv"),
        deliveries=deliveries,
        callbacks=callbacks,
        faults=read_faults(run_dir / "faults.json"),
        zk=zk,
        session_timeout_s=session_timeout_s,
        guarantee=guarantee_for(info["mode"], info.get("guarantee") or {"session_timeout_s": session_timeout_s}),
        paused=paused_windows(run_dir, zk, info.get("processes") or {}),
        server_hangs=zookeeper_hangs(run_dir, session_timeout_s),
        acked_at=read_ack_times(run_dir / "acks.tsv"),
        batches=events.batches,
    )
    if events.torn_lines:
        report.notes.append(f"{events.torn_lines} event log line(s) cut short (a process killed mid-write)")
    for name, code in (info.get("exit_codes") or {}).items():
        if code not in (0, None):
            report.notes.append(f"{name} exited with status {code} after SIGTERM")
    for finding in scan_member_logs(run_dir):
        report.notes.append(f"member logs: {finding}")
    for flood in log_floods(run_dir):
        report.notes.append(f"log flood: {flood}")
    producer = info.get("producer") or {}
    if producer.get("thread_error"):
        report.problems.append(f"the producing thread died: {producer['thread_error'].splitlines()[0]}")
    if producer.get("without_report"):
        report.problems.append(f"{producer['without_report']} record(s) never got a delivery report")
    if producer.get("failed"):
        report.notes.append(f"{producer['failed']} record(s) failed to produce (not judged): {producer.get('failures')}")
    recovering = (info.get("drain") or {}).get("recovering")
    if recovering:
        report.notes.append("recovery ranges left after the drain: " + ", ".join(f"[{p}] {n}" for p, n in sorted(recovering.items())))
    behind = (info.get("drain") or {}).get("behind")
    if behind:
        view = info.get("final_view") or {}
        owners, pids = view.get("owners", {}), view.get("pids", {})
        names = {str(pid): name for name, pid in (info.get("processes") or {}).items()}
        stuck = []
        for p, (done, high) in sorted(behind.items(), key=lambda kv: int(kv[0])):
            owner = owners.get(p)
            pid = pids.get(owner) if owner else None
            who = f"{names.get(str(pid), '?')} (pid {pid})" if pid else "nobody"
            stuck.append(f"[{p}] committed {done} of {high}, held by {who}")
        report.notes.append("not committed to the end after the drain: " + "; ".join(stuck))
    if (info.get("settings") or {}).get("commit_to_kafka"):
        names = {pid: name for name, pid in (info.get("processes") or {}).items()}
        partitions = range(int(info["partitions"]))
        restarts = [(f.start, f.end) for f in read_faults(run_dir / "faults.json") if f.kind == "broker_restart"]
        report.mirror = judge_mirror(
            read_mirror(run_dir / "mirror.tsv"), zk, info["topic"], partitions, names, broker_restarts=restarts
        )
        report.problems += report.mirror.problems
    for fault in read_faults(run_dir / "faults.json"):
        if "error" in fault.detail:
            report.problems.append(f"fault {fault.kind} at {fault.start:.3f} did not run as planned: {fault.detail['error']}")
    data = {**report.as_dict(), "seed": info["seed"], "wall_s": info.get("wall_s"), "load_s": info.get("load_s")}
    (run_dir / "report.json").write_text(json.dumps(data, indent=1) + "\n")
    text = format_table(report) + f"\nseed {info['seed']}, wall time {info.get('wall_s')} s, run directory {run_dir}\n"
    (run_dir / "report.txt").write_text(text)
    return report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.soak.check RUN_DIR", file=sys.stderr)
        return 2
    report = judge(Path(argv[0]))
    print((Path(argv[0]) / "report.txt").read_text())
    return 0 if report.violations == 0 and not report.problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
