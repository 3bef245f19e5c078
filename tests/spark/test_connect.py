"""The Spark pipeline through a real Spark Connect server (``spark.remote``).

One server for the module: pyspark's own, started from the installed wheel with
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` (the wheel
ships the script and the ``spark-connect`` jar). The module is skipped, saying why, only when
that server cannot start here (no Java, a wheel without the jar, a server that never listens).

Every Connect client runs in a child process: a Connect session and the classic session of the
other tests (tests/spark/conftest.py) must not meet in one interpreter, and a ``jetkafka run``
with ``spark.remote`` is a process holding a Connect client only, as in production.

Asserted: a ``jetkafka run`` instance writes every event once through ``ParquetSink`` and
commits its offsets, no micro-batch failing; ``jetkafka spark compact`` compacts the finished
micro-batches through the same server; a micro-batch cut out of a worker batch (an Arrow
slice) becomes a DataFrame; and the stage's save mode still refuses a directory that exists,
over Connect as locally, so a staging directory is never written twice.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.pipeline.events import encode, generate_events
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.devstack._lifetime import die_with_parent
from tests.spark.helpers import TEST_SPARK_CONF
from tests.spark.test_crash_replay import member_config
from tests.support.channels import wait_until
from tests.support.processes import REPO, Member

PARTITIONS = 2
EVENTS = 400
SERVER_START_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:<port>`` of a Spark Connect server running for this module."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    submit = os.path.join(home, "bin", "spark-submit")
    if shutil.which("java") is None:
        pytest.skip("no Spark Connect server here: no java on PATH")
    if not os.path.exists(submit) or not glob.glob(os.path.join(home, "jars", "spark-connect_*.jar")):
        pytest.skip(f"no Spark Connect server here: the pyspark wheel at {home} has no spark-submit or spark-connect jar")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("connect-server") / "server.log"
    java_options = TEST_SPARK_CONF["spark.driver.extraJavaOptions"]
    command = [
        submit,
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--driver-memory", "768m",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", f"spark.driver.extraJavaOptions={java_options}",
        *(arg for key, value in TEST_SPARK_CONF.items() if key != "spark.driver.extraJavaOptions"
          for arg in ("--conf", f"{key}={value}")),
    ]
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            command,
            env={**os.environ, "SPARK_HOME": home},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - two system calls in the child
        )
    try:
        deadline = time.monotonic() + SERVER_START_S
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text()[-2000:]
                why = f"exited with {server.returncode}" if server.returncode is not None else "not listening"
                pytest.skip(f"the Spark Connect server cannot start here ({why} after {SERVER_START_S:.0f} s at most): {tail}")
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)


def test_a_pipeline_through_spark_connect_writes_every_event_once_and_compacts(
    connect_url: str, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    events = generate_events(EVENTS, seed=61)
    produce(topic, [(i % PARTITIONS, None, encode(e)) for i, e in enumerate(events)])
    out = str(tmp_path / "events")
    config = member_config(zk_connect, kafka_config, topic, "tests.spark.helpers:id_writer", {"path": out})
    # A few micro-batches, for compaction, some of them cut out of a worker batch.
    config["processor"]["options"]["max_events"] = 70
    config["spark"] = {"remote": connect_url}
    member = Member(tmp_path, "connect", config)
    store = OffsetStore(zk, GroupPaths("g"))
    everything = {p: EVENTS // PARTITIONS for p in range(PARTITIONS)}
    try:
        # Ends early when a micro-batch fails: it would be retried with back-off for ever.
        wait_until(
            lambda: store.read_all(topic) == everything or " failed (attempt " in member.log()
            or member.proc.poll() is not None,
            timeout=180,
            what="every offset committed through Spark Connect",
        )
        log = member.log()
        assert " failed (attempt " not in log and member.proc.poll() is None, log[-3000:]
        assert store.read_all(topic) == everything
        assert member.terminate(60) == 0, member.log()[-3000:]
    finally:
        member.stop_quietly()
    written = Counter(_ids(out))
    assert written == Counter(e["id"] for e in events)

    # Compaction of the finished micro-batches, through the same server.
    next_id = int(zk.get(f"{GroupPaths('g').root}/microbatches/batch-id")[0])
    assert next_id > 2, "fewer than two micro-batches: nothing to compact"
    compact = subprocess.run(
        [sys.executable, "-m", "jetkafka", "spark", "compact", "--config", str(member.config_path),
         "--path", out, "--from", "1", "--to", str(next_id - 1)],
        cwd=str(REPO), capture_output=True, text=True, timeout=180, check=False,
    )
    assert compact.returncode == 0, compact.stdout + compact.stderr
    assert sorted(p.name for p in Path(out).glob("batch_id=*")) == ["batch_id=1"]
    assert Counter(_ids(out)) == written


def _ids(path: str) -> list[str]:
    """The ``id`` of every row under ``path``, read with pyarrow (no Spark session here)."""
    import pyarrow.dataset as ds

    return list(ds.dataset(path, format="parquet").to_table(columns=["id"]).column("id").to_pylist())


BUILDING_BLOCKS = """
import sys
from confluent_kafka import Message
from pyspark.sql import SparkSession
from jetkafka.spark._arrow import messages_to_arrow, to_dataframe, to_table
from jetkafka.spark._publish import REFUSE_EXISTING
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()

# A micro-batch holding the rest of a worker batch cut at max_events: a slice of it.
messages = [
    Message(topic="t", partition=0, offset=i, key=None, value=b'{"id": "e%d"}' % i, headers=None,
            timestamp=(1, 1_700_000_000_000))
    for i in range(10)
]
cut = to_table([messages_to_arrow(messages).slice(4)])
for value_format, schema in (("json", "id STRING"), ("binary", None)):
    rows = to_dataframe(spark, cut, value_format, schema).select("offset", "headers").collect()
    print("BUILT", value_format, [r["offset"] for r in rows], {r["headers"] for r in rows})

df = spark.createDataFrame([("t", 0, "a")], "topic STRING, partition INT, id STRING")
df.write.mode(REFUSE_EXISTING).parquet(sys.argv[2])
try:
    df.write.mode(REFUSE_EXISTING).parquet(sys.argv[2])
except Exception as exc:
    print("REFUSED", type(exc).__name__, str(exc).splitlines()[0])
else:
    print("WRITTEN TWICE")
"""


def test_the_sinks_building_blocks_work_over_connect(connect_url: str, tmp_path: Path) -> None:
    """Over Connect: the DataFrame of a micro-batch that is the rest of a cut worker batch (an
    Arrow slice) is built, and the stage's save mode (``ParquetSink``, compaction) refuses a
    directory that exists, so a staging directory is never written twice (the same mode
    locally: tests/spark/test_sinks.py)."""
    script = tmp_path / "blocks.py"  # a file: pyspark takes a main module without one for its doctests
    script.write_text(BUILDING_BLOCKS)
    run = subprocess.run(
        [sys.executable, str(script), connect_url, str(tmp_path / "staged")],
        cwd=str(REPO), capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BUILT json [4, 5, 6, 7, 8, 9] {None}" in run.stdout, run.stdout + run.stderr
    assert "BUILT binary [4, 5, 6, 7, 8, 9] {None}" in run.stdout, run.stdout + run.stderr
    assert "REFUSED AnalysisException [PATH_ALREADY_EXISTS]" in run.stdout, run.stdout + run.stderr
