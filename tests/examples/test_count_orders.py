"""examples/count_orders.yaml run the way examples/README.md describes, on the test cluster.

``jetkafka run examples/count_orders.yaml --pythonpath examples`` runs as a child process with
the addresses in the environment, counts the orders of a fresh topic, and on SIGTERM exits 0
after writing its final counts: every produced order is counted, exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from kazoo.client import KazooClient

from jetkafka.config import load_config
from tests.support.channels import committed_offsets, wait_until

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "count_orders.yaml"
GROUP = "count-orders"
PARTITIONS = 4
ORDERS = 3000


def jetkafka_command() -> list[str]:
    """The ``jetkafka`` console script next to this interpreter, else ``python -m jetkafka``."""
    script = Path(sys.executable).with_name("jetkafka")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "jetkafka"]


def test_defaults_point_at_a_local_stack() -> None:
    config = load_config(CONFIG, env={})
    assert config.zookeeper.connect == "127.0.0.1:2181/jetkafka"
    assert config.kafka["bootstrap.servers"] == "127.0.0.1:9092"
    assert config.channel.topics == ("orders",)
    assert config.processor is not None
    assert config.processor.class_path == "count_orders:OrderCounter"
    assert config.processor.options["report"] == ""


def test_counts_every_order_and_exits_0_on_sigterm(cluster, zk_connect, topic_factory, produce, tmp_path) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    records = [
        (i % PARTITIONS, str(i).encode(), json.dumps({"order_id": i, "amount": 2.5}).encode())
        for i in range(ORDERS)
    ]
    records.append((1, None, b"not an order"))
    offsets = produce(topic, records)
    ends = {p: 0 for p in range(PARTITIONS)}
    for (partition, *_), offset in zip(records, offsets, strict=True):
        ends[partition] = max(ends[partition], offset + 1)
    per_partition = Counter(partition for partition, *_ in records[:ORDERS])

    report = tmp_path / "counts.json"
    log_path = tmp_path / "count_orders.log"
    env = {
        **os.environ,
        "JETKAFKA_ZOOKEEPER": zk_connect,  # host:port/chroot of this test; the file adds /jetkafka
        "JETKAFKA_BOOTSTRAP": cluster.bootstrap,
        "ORDERS_TOPIC": topic,
        "COUNT_ORDERS_REPORT": str(report),
        "PYTHONUNBUFFERED": "1",
    }
    # The chroot the file adds, created up front so the client below can be rooted in it.
    root = KazooClient(hosts=zk_connect)
    root.start(timeout=15)
    root.ensure_path("/jetkafka")
    root.stop()
    root.close()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [*jetkafka_command(), "run", "examples/count_orders.yaml", "--pythonpath", "examples"],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    zk = KazooClient(hosts=f"{zk_connect}/jetkafka")
    try:
        zk.start(timeout=15)

        def all_committed() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"jetkafka run exited early ({proc.returncode}):\n{log_path.read_text()}")
            return committed_offsets(zk, GROUP, topic) == ends

        wait_until(all_committed, timeout=90, what=f"offsets {ends} committed")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        zk.stop()
        zk.close()
    log = log_path.read_text()
    assert code == 0, f"exit code {code} after SIGTERM:\n{log}"
    assert f"final count: {ORDERS} orders (1 malformed) in {PARTITIONS} partitions" in log, log

    counts = json.loads(report.read_text())
    assert counts["group"] == GROUP
    assert counts["orders"] == ORDERS
    assert counts["malformed"] == 1
    assert counts["amount"] == ORDERS * 2.5
    assert {name: c["orders"] for name, c in counts["partitions"].items()} == {
        f"{topic}[{p}]": per_partition[p] for p in range(PARTITIONS)
    }
    for p in range(PARTITIONS):
        assert f"{topic}[{p}]: released at offset {ends[p]} after counting {per_partition[p]} orders" in log
