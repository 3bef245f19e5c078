"""The same group name under another chroot, as ``jetkafka status`` reports it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kazoo.client import KazooClient

from jetkafka.config import parse_config
from jetkafka.ops._other_chroots import GroupElsewhere, find_group_elsewhere, group_elsewhere
from tests.support.channels import channel_config

REPO = Path(__file__).resolve().parents[2]


def test_the_group_is_found_beside_and_above_its_chroot(cluster: Any) -> None:
    group, base = f"g-{uuid.uuid4().hex[:8]}", f"/oc-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=cluster.zookeeper)
    root.start(timeout=10)
    try:
        root.ensure_path(f"{base}/a/consumers/{group}/ids/web-1")
        root.ensure_path(f"{base}/a/consumers/{group}/ids/web-2")
        root.ensure_path(f"{base}/b/consumers/{group}/offsets")  # ran once, nobody live now
        root.ensure_path(f"{base}/c/consumers/other-group/ids")
        root.ensure_path(f"{base}/consumers/{group}/ids")  # the parent used as a chroot itself
        found = find_group_elsewhere(root, f"{base}/b", group)
        assert found == [GroupElsewhere(base, 0), GroupElsewhere(f"{base}/a", 2)]
        assert find_group_elsewhere(root, f"{base}/c", "other-group") == []
    finally:
        root.delete(base, recursive=True)
        root.stop()
        root.close()


def test_status_notes_the_same_group_under_another_chroot(
    tmp_path: Path, cluster: Any, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    group, base = f"g-{uuid.uuid4().hex[:8]}", f"/oc-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=cluster.zookeeper)
    root.start(timeout=10)
    try:
        root.ensure_path(f"{base}/other/consumers/{group}/ids/web-1")
        data = channel_config(f"{cluster.zookeeper}{base}/mine", kafka_config, [topic], group=group)
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(data))
        assert group_elsewhere(parse_config(data).zookeeper, group) == [GroupElsewhere(f"{base}/other", 1)]

        run = subprocess.run(
            [sys.executable, "-m", "jetkafka", "status", "--config", str(path)],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )
        assert run.returncode == 0, run.stderr
        assert f"note: a group named {group} also exists under chroot {base}/other of this ZooKeeper (1 live instance(s))" in run.stdout

        run = subprocess.run(
            [sys.executable, "-m", "jetkafka", "status", "--config", str(path), "--json"],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )
        assert json.loads(run.stdout)["elsewhere"] == [{"chroot": f"{base}/other", "live_instances": 1}]
    finally:
        root.delete(base, recursive=True)
        root.stop()
        root.close()


def test_an_unreachable_ensemble_gives_no_hint_and_no_error() -> None:
    config = parse_config(
        {
            "zookeeper": {"connect": "127.0.0.1:1/x", "connection_timeout_s": 0.5},
            "kafka": {"bootstrap.servers": "127.0.0.1:1"},
            "channel": {"group": "g", "topics": ["t"]},
        }
    )
    assert group_elsewhere(config.zookeeper, "g") == []
