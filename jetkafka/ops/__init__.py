"""Operating a group: Prometheus metrics, ``jetkafka status``, and online offset resets.

- :mod:`jetkafka.ops._metrics`: a channel's Prometheus metrics, read at each scrape.
- :mod:`jetkafka.ops._metrics_endpoint`: the HTTP endpoint a channel serves them on when
  ``metrics.port`` is set.
- :mod:`jetkafka.ops._metrics_add_on`: the channel add-on that attaches a channel to it.
- :mod:`jetkafka.ops._http`: the threaded HTTP server of that port and of ``jetkafka ui``.
- :mod:`jetkafka.ops._health`: ``/healthz`` and ``/readyz``, liveness and readiness.
- :mod:`jetkafka.ops._status_view`: the data of the status page (``/`` and ``/status.json``).
- :mod:`jetkafka.ops._ui`: ``jetkafka ui``, the status page of a whole group without a channel.
- :mod:`jetkafka.ops._status`: the group as ZooKeeper and the brokers see it (``group_status``,
  ``show_offsets``); needs no running channel. :mod:`jetkafka.ops._status_watch` redraws it
  for ``jetkafka status --watch``; :mod:`jetkafka.ops._other_chroots` finds the group's name
  under other chroots of the ensemble.
- :mod:`jetkafka.ops._reset`: ``reset_offsets`` and ``undo_reset``, the command side of
  ResetOffset; :mod:`jetkafka.ops._plan` computes a reset's targets and its ``--dry-run``
  plan (``plan_reset``); :mod:`jetkafka.ops._history` keeps the offsets history.
- :mod:`jetkafka.ops._responder`: the instance side of ResetOffset, run by every channel (as
  a channel add-on).
- :mod:`jetkafka.ops._commands`: the ``status`` and ``offsets`` subcommands of ``jetkafka``.
- :mod:`jetkafka.ops._group_admin`: every group of a chroot (``jetkafka groups``), and deleting,
  exporting and importing a group's offsets only while it has no members;
  :mod:`jetkafka.ops._offsets_file` is the JSON file of export and import;
  :mod:`jetkafka.ops._group_commands` the ``groups`` and ``offsets delete|export|import`` commands.

Names are imported lazily, so a channel that never serves metrics never imports
prometheus-client.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "group_status": "jetkafka.ops._status",
    "show_offsets": "jetkafka.ops._status",
    "GroupStatus": "jetkafka.ops._status",
    "PartitionStatus": "jetkafka.ops._status",
    "InstanceStatus": "jetkafka.ops._status",
    "reset_offsets": "jetkafka.ops._reset",
    "undo_reset": "jetkafka.ops._reset",
    "plan_reset": "jetkafka.ops._plan",
    "ResetPlan": "jetkafka.ops._plan",
    "PlannedMove": "jetkafka.ops._plan",
    "HistoryEntry": "jetkafka.ops._history",
    "ResetResult": "jetkafka.ops._reset",
    "ResetError": "jetkafka.ops._reset",
    "ResetIncomplete": "jetkafka.ops._reset",
    "PartitionReset": "jetkafka.ops._reset",
    "ChannelMetrics": "jetkafka.ops._metrics",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazily imported names, listed once in _EXPORTS


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jetkafka.ops' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
