"""The soak's reading of ZooKeeper's transaction log, on a real server.

Injected: on a ZooKeeper server of the test's own (its data directory is read afterwards),
sessions that take a partition as jetkafka does (one multi: ephemeral owner node + offset
write), commit under the check of the owner node, have a commit refused (a failed multi), write
an offset without owning the partition, lower an offset with and without a reset's ``done``
marker, write, shrink and delete a partition's recovery ranges, pause and resume the group, and
a process SIGKILLed while holding a partition, whose session the server expires.
Asserted: the Python decoder returns exactly the transactions ZooKeeper's own
``TxnLogToolkit`` dumps (zxid, session, request number, type, and each operation of a multi);
the replay finds the foreign write and the lowered offset and nothing else, tells the expired
session (server-side close) from the closed ones, maps sessions to the pid of their
registration, ends the killed process's hold at its expiry, gives each hold the fencing token
kazoo reported to the taker, gives the committed offset and the recovery ranges at any time,
and the pause marker's life.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from jetkafka.devstack import ZooKeeperServer, find_java
from jetkafka.devstack._zookeeper import zookeeper_classpath
from tests.soak.fencing import replay
from tests.support.zk_txnlog import Txn, read_txn_logs, txn_log_files

# Starts a ZooKeeper server of its own (see tests/conftest.py).
pytestmark = pytest.mark.cluster

GROUP = "g"
OWNER = "/consumers/g/owners/t/{}"
OFFSET = "/consumers/g/offsets/t/{}"

_HOLDER = """
import json, os, sys, time
from kazoo.client import KazooClient

c = KazooClient(hosts=sys.argv[1], timeout=2)
c.start(10)
c.create("/consumers/g/ids/holder", json.dumps({"pid": os.getpid()}).encode(), ephemeral=True, makepath=True)
tx = c.transaction()
tx.create("/consumers/g/owners/t/1", b"holder", ephemeral=True)
tx.set_data("/consumers/g/offsets/t/1", b"5")
assert not any(isinstance(r, Exception) for r in tx.commit())
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zk")
    server.ends_with_parent = True
    server.start(timeout=120)
    yield server
    server.stop()


def _client(server: ZooKeeperServer, pid: int | None = None) -> KazooClient:
    client = KazooClient(hosts=server.connect_string, timeout=10)
    client.start(timeout=30)
    if pid is not None:
        client.create(f"/consumers/g/ids/c{pid}", json.dumps({"pid": pid}).encode(), ephemeral=True, makepath=True)
    return client


def _take(client: KazooClient, p: int, offset: bytes, version: int) -> list:
    tx = client.transaction()
    tx.create(OWNER.format(p), b"me", ephemeral=True)
    tx.set_data(OFFSET.format(p), offset, version=version)
    return tx.commit()


def _commit(client: KazooClient, p: int, offset: int, version: int) -> list:
    tx = client.transaction()
    tx.check(OWNER.format(p), 0)
    tx.set_data(OFFSET.format(p), str(offset).encode(), version=version)
    return tx.commit()


def _history(server: ZooKeeperServer) -> dict:
    """Every fenced and unfenced write the replay must tell apart, on the server; returns facts."""
    a, b = _client(server, pid=101), _client(server, pid=202)
    for p in (0, 1):
        a.ensure_path(OFFSET.format(p))
    a.ensure_path("/consumers/g/owners/t")
    taken = _take(a, 0, b"", 0)
    assert taken[0] == OWNER.format(0)
    assert _commit(a, 0, 10, 1)[1].version == 2
    assert _commit(a, 0, 20, 2)[1].version == 3
    # b does not own partition 0, but a write that names the current node versions goes through
    # on the server: exactly what the replay must catch.
    assert _commit(b, 0, 999, 3)[1].version == 4
    failed = _commit(a, 0, 30, 3)  # a's offset version is stale now: refused, changes nothing
    assert not any(hasattr(r, "version") for r in failed)
    before_unfenced = time.time()
    time.sleep(0.05)
    b.set(OFFSET.format(0), b"7")  # an unfenced write, lowering the offset
    time.sleep(0.05)
    after_unfenced = time.time()
    a.ensure_path("/consumers/g/commands/reset-r1/done")
    tx = a.transaction()  # a reset as the owner applies it: offset lowered with its done marker
    tx.check(OWNER.format(0), 0)
    tx.set_data(OFFSET.format(0), b"3")
    tx.create("/consumers/g/commands/reset-r1/done/0", b"{}")
    assert tx.commit()[1].version == 6
    recovery = "/consumers/g/recovery/t/0"  # ranges as jetkafka's recovery ledger writes them
    a.create(recovery, json.dumps({"ranges": [[0, 40], [50, 60]], "lost": 0}).encode(), makepath=True)
    time.sleep(0.05)
    between_ranges = time.time()
    time.sleep(0.05)
    a.set(recovery, json.dumps({"ranges": [[30, 40], [50, 60]], "lost": 0}).encode())
    time.sleep(0.05)
    a.delete(recovery)
    a.create("/consumers/g/control/paused/_all", b"{}", makepath=True)  # jetkafka pause, then resume
    a.delete("/consumers/g/control/paused/_all")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, server.connect_string], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    killed = time.time()
    deadline = time.monotonic() + 30
    while a.exists(OWNER.format(1)) is not None:
        assert time.monotonic() < deadline, "the killed holder's session never expired"
        time.sleep(0.1)
    a.delete(OWNER.format(0))  # a graceful release
    a.stop()
    a.close()
    b.stop()
    b.close()
    return {
        "holder": holder.pid, "killed": killed, "before_unfenced": before_unfenced, "after_unfenced": after_unfenced,
        "a_token": taken[1].version, "between_ranges": between_ranges,
    }


def _toolkit_dump(log: Path) -> list[tuple[int, int, int, str, list[tuple[str, str]]]]:
    """``(zxid, session, cxid, type, [(op, path)...])`` per transaction, as ZooKeeper's tool prints them."""
    jars = Path(zookeeper_classpath().split(os.pathsep)[0]).parent
    cli = sorted(jars.glob("commons-cli-*.jar"))
    assert cli, f"no commons-cli jar in {jars} for TxnLogToolkit"
    classpath = os.pathsep.join([zookeeper_classpath(), str(cli[-1])])
    out = subprocess.run(
        [find_java(), "-cp", classpath, "org.apache.zookeeper.server.persistence.TxnLogToolkit", "-d", str(log)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    # Records are printed as raw bytes (lengths and versions included), which may hold line
    # breaks or semicolons: entries are cut where the next header starts, operations where the
    # next "name:" follows a semicolon, and a path is the first run of printable text from "/".
    entry = re.compile(
        r"session (0x[0-9a-f]+) cxid (0x[0-9a-f]+) zxid (0x[0-9a-f]+) (\w+) ?(.*?)"
        r"(?=\n[^\n]*session 0x[0-9a-f]+ cxid 0x|\nEOF reached|\Z)",
        re.DOTALL,
    )
    op = re.compile(r"(?:^|;)(check|setData|create|create2|delete|error):(.*?)(?=;(?:check|setData|create|create2|delete|error):|$)", re.DOTALL)
    rows = []
    for m in entry.finditer(out):
        ops = []
        if m[4] == "multi":
            for name, rest in op.findall(m[5].rstrip()):
                path = re.search(r"/[^\x00-\x1f]*", rest) if name != "error" else None
                ops.append(("create" if name == "create2" else name, path.group(0).rstrip() if path else ""))
        rows.append((int(m[3], 16), int(m[1], 16), int(m[2], 16), m[4], ops))
    return rows


def _ours(txns: list[Txn]) -> list[tuple[int, int, int, str, list[tuple[str, str]]]]:
    return [(t.zxid, t.session, t.cxid, t.kind, [(o.kind, o.path) for o in t.ops] if t.kind == "multi" else []) for t in txns]


def test_decoder_agrees_with_zookeepers_own_dump(zookeeper: ZooKeeperServer) -> None:
    _history(zookeeper)
    zookeeper.stop()
    logs = txn_log_files(zookeeper.data_dir)
    assert logs, "no transaction log written"
    theirs = [row for log in logs for row in _toolkit_dump(log)]
    # The tool names create variants and errors by opcode; the decoder folds creates into one kind.
    theirs = [(z, s, c, "create" if k in ("create2", "createContainer", "createTTL") else k, ops) for z, s, c, k, ops in theirs]
    ours = _ours(read_txn_logs(zookeeper.data_dir))
    assert len(ours) == len(theirs) > 20
    assert ours == theirs


def test_replay_finds_the_foreign_write_the_lowered_offset_and_the_expiry(zookeeper: ZooKeeperServer) -> None:
    facts = _history(zookeeper)
    zookeeper.stop()
    history = replay(read_txn_logs(zookeeper.data_dir), GROUP)

    by_pid = {s.pid: s for s in history.sessions.values() if s.pid is not None}
    assert set(by_pid) == {101, 202, facts["holder"]}
    assert all(s.role == "member" for s in by_pid.values())
    a, b, holder = by_pid[101], by_pid[202], by_pid[facts["holder"]]
    assert not a.expired and not b.expired and a.closed is not None and b.closed is not None
    assert holder.expired and holder.closed is not None and holder.closed >= facts["killed"] - 0.5

    foreign = history.foreign_writes
    assert [(w.session, w.partition, w.offset, w.owner) for w in foreign] == [
        (b.id, 0, 999, a.id),
        (b.id, 0, 7, a.id),
    ]
    back = history.backward_writes
    assert [(w.session, w.previous, w.offset) for w in back] == [(b.id, 999, 7)]
    reset = [w for w in history.writes if w.reset_id is not None]
    assert [(w.reset_id, w.previous, w.offset, w.foreign) for w in reset] == [("r1", 7, 3, False)]

    holds = {(h.session, h.partition): h for h in history.holds}
    assert holds[(holder.id, 1)].how == "session expired" and holds[(holder.id, 1)].end == holder.closed
    assert holds[(a.id, 0)].how == "released"
    assert history.committed_at("t", 0, facts["before_unfenced"]) == 999
    assert history.committed_at("t", 0, facts["after_unfenced"]) == 7
    assert history.committed_at("t", 0, float("inf")) == 3
    assert history.committed_at("t", 1, 0) is None
    assert [s.pid for s in history.expiries()] == [facts["holder"]]
    # Fencing tokens: the offset node's version after the take, as kazoo reported it to the taker.
    assert holds[(a.id, 0)].epoch == facts["a_token"] == 1
    assert history.hold_by_epoch("t", 0, facts["a_token"]) == holds[(a.id, 0)]
    assert holds[(holder.id, 1)].epoch == 1  # partition 1's node was created empty, then taken
    assert history.ranges_at("t", 0, facts["between_ranges"]) == ((0, 40), (50, 60))
    assert history.ranges_at("t", 0, float("inf")) == ()
    assert history.in_ranges("t", 0, 35, facts["between_ranges"], float("inf"))
    assert not history.in_ranges("t", 0, 45, 0, float("inf"))
    (pause,) = history.pauses
    assert pause.who == "_all" and facts["between_ranges"] < pause.created <= pause.removed < facts["killed"]
