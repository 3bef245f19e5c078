"""``jetkafka status --config DIR``: every subscription of a folder of channel files, read from ZooKeeper and Kafka.

The folder is read as ``jetkafka run DIR`` reads it (:func:`jetkafka.subscriptions.read_folder`);
each valid file's group is read as ``jetkafka status`` reads one
(:func:`~jetkafka.ops._status.read_group_status`), through one ZooKeeper session (the
channels of a folder share it) and one broker view per distinct ``kafka`` section. A table
with a line per subscription comes first, then each group's own status unless ``--brief``.
A refused file is listed with its first error. Reads only, as ``jetkafka status``.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

from jetkafka.coordination._session import zookeeper_session
from jetkafka.ops._status import BrokerView, GroupStatus, describe_lag, read_group_status, render_status
from jetkafka.ops._tables import format_table
from jetkafka.subscriptions._folder import read_folder


def folder_status(folder: str) -> list[tuple[str, GroupStatus | None, str]]:
    """(file, its group's status or None when refused, the refusal or "") per channel file."""
    reading = read_folder(folder)
    out: list[tuple[str, GroupStatus | None, str]] = []
    valid = reading.valid()
    refused = {f.path: str(f.errors[0]).splitlines()[0].removeprefix(f"{f.path}: ") for f in reading.files if not f.ok and f.errors}
    if not valid:
        return [(path, None, error) for path, error in refused.items()]
    with ExitStack() as stack:
        first = valid[0].config
        assert first is not None
        client = stack.enter_context(zookeeper_session(first.zookeeper))
        brokers: dict[str, BrokerView] = {}
        for file in reading.files:
            if not file.ok:
                out.append((file.path, None, refused.get(file.path, "invalid")))
                continue
            config = file.config
            assert config is not None
            key = json.dumps(dict(config.kafka), sort_keys=True, default=str)
            if key not in brokers:
                brokers[key] = stack.enter_context(BrokerView(config.kafka, config.channel.group))
            status = read_group_status(client, brokers[key], config.channel.group, config.channel.topics)
            out.append((file.path, status, ""))
    return out


def render_folder_status(rows: list[tuple[str, GroupStatus | None, str]], brief: bool = False) -> str:
    table = format_table(
        ("FILE", "GROUP", "INSTANCES", "OWNED", "NOT MOVING ON", "LAG"),
        (
            (
                path.rsplit("/", 1)[-1],
                status.group if status else "-",
                len(status.instances) if status else "-",
                f"{sum(1 for p in status.partitions if p.owner)}/{len(status.partitions)}" if status else "-",
                sum(1 for p in status.partitions if p.failure is not None) if status else "-",
                describe_lag(status) if status else f"refused: {error}",
            )
            for path, status, error in rows
        ),
        right={2, 4},
    )
    parts = ["\n".join(table) if rows else "no channel files (*.yaml, *.yml) in the folder"]
    if not brief:
        parts += [f"== {path}\n{render_status(status)}" for path, status, _ in rows if status is not None]
    return "\n\n".join(parts)


def folder_status_dict(rows: list[tuple[str, GroupStatus | None, str]]) -> dict[str, Any]:
    """The ``--json`` form: one entry per file, its group's ``status --json`` under ``status``."""
    return {
        "subscriptions": [
            {"file": path, "status": status.to_dict() if status else None, "refused": error or None}
            for path, status, error in rows
        ]
    }


__all__ = ["folder_status", "folder_status_dict", "render_folder_status"]
