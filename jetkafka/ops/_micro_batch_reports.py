"""Micro-batch figures of each instance, as ``jetkafka status`` and the metrics show them.

An instance running the Spark processor keeps the figures of its last committed micro-batch
(events, seconds per phase, output files and bytes) and its totals in an ephemeral node,
``/consumers/<group>/microbatches/instances/<consumer-id>`` (JSON), rewritten after each
commit without waiting for ZooKeeper's answer. The node goes with the instance's session, so
``jetkafka status`` lists the live instances' figures only. A report is a view, never an input
to any decision: a lost write only makes the figures older.

The phases are those of :mod:`jetkafka.spark._figures` (gather, wait, record, build, fn,
commit); this module does not import the Spark package, so the status command works in an
installation without the ``spark`` extra.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._tables import format_table

log = logging.getLogger(__name__)

PHASES = ("gather", "wait", "record", "build", "fn", "commit")


@dataclass(frozen=True)
class MicroBatchReport:
    """One instance's micro-batch figures: its last committed micro-batch and its totals."""

    consumer: str
    batches: int  # committed over the processor's life
    events: int
    failures: int  # fn attempts that raised
    held_events: int  # in memory when reported
    phase_seconds: dict[str, float]  # totals per phase
    output_files: int
    output_bytes: int
    last_batch_id: int | None = None
    last_events: int = 0
    last_seconds: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    last_output_files: int | None = None
    last_output_bytes: int | None = None
    last_committed_at: float | None = None  # epoch seconds
    gather_failures: int = 0  # batches whose gathering raised and were read again

    @property
    def last_total_seconds(self) -> float:
        """The last micro-batch from its close to its commit."""
        return sum(s for phase, s in self.last_seconds.items() if phase != "gather")

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> MicroBatchReport | None:
        """The report in ``data``, or None when it is not one (a newer or older writer)."""
        try:
            raw = json.loads(data)
            known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
            return cls(**known)
        except (ValueError, TypeError):
            return None


@runtime_checkable
class ReportsMicroBatches(Protocol):
    """A processor with micro-batch figures (the Spark processor)."""

    def micro_batch_report(self, consumer: str) -> MicroBatchReport | None: ...


def report_path(paths: GroupPaths, consumer: str) -> str:
    return f"{paths.root}/microbatches/instances/{consumer}"


def publish_report(client: KazooClient, paths: GroupPaths, report: MicroBatchReport) -> None:
    """Write the instance's report without waiting: set it, or create the ephemeral node."""
    path = report_path(paths, report.consumer)
    data = report.encode()

    def created(result: Any) -> None:
        try:
            result.get()
        except NodeExistsError:
            # Another report created it first (two commits answered "no node"): set it again.
            client.set_async(path, data).rawlink(logged)
        except Exception as exc:  # noqa: BLE001 - figures only: an older report stays
            log.debug("micro-batch report %s not written: %s", path, exc)

    def logged(result: Any) -> None:
        try:
            result.get()
        except Exception as exc:  # noqa: BLE001 - figures only: an older report stays
            log.debug("micro-batch report %s not written: %s", path, exc)

    def written(result: Any) -> None:
        try:
            result.get()
        except NoNodeError:
            client.create_async(path, data, ephemeral=True, makepath=True).rawlink(created)
        except Exception as exc:  # noqa: BLE001 - figures only: an older report stays
            log.debug("micro-batch report %s not written: %s", path, exc)

    client.set_async(path, data).rawlink(written)


def withdraw_report(client: KazooClient, paths: GroupPaths, consumer: str) -> None:
    """Delete the instance's report without waiting (the processor stopped)."""
    path = report_path(paths, consumer)

    def deleted(result: Any) -> None:
        try:
            result.get()
        except Exception as exc:  # noqa: BLE001 - gone already, or the session is: the node goes with it
            log.debug("micro-batch report %s not deleted: %s", path, exc)

    try:
        client.delete_async(path).rawlink(deleted)
    except Exception as exc:  # noqa: BLE001 - a closed client: the ephemeral node goes with its session
        log.debug("micro-batch report %s not deleted: %s", path, exc)


def read_reports(client: KazooClient, paths: GroupPaths) -> list[MicroBatchReport]:
    """The live instances' reports, by consumer id; none when the group never ran micro-batches."""
    root = f"{paths.root}/microbatches/instances"
    try:
        names = sorted(client.get_children(root))
    except NoNodeError:
        return []
    out = []
    for name in names:
        try:
            data, _ = client.get(f"{root}/{name}")
        except NoNodeError:
            continue  # the instance left meanwhile
        report = MicroBatchReport.decode(data)
        if report is not None:
            out.append(report)
    return out


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return "-"


def render_reports(reports: Iterable[MicroBatchReport], now: float) -> list[str]:
    """The "micro-batches" part of ``jetkafka status``: the last micro-batch of each instance,
    its seconds per phase, and the instance's totals."""
    reports = list(reports)
    if not reports:
        return []
    def phases(seconds: Mapping[str, float]) -> list[str]:
        return [f"{seconds.get(p, 0.0):.2f}" for p in PHASES]

    rows = []
    for r in reports:
        ago = "-" if r.last_committed_at is None else f"{max(0.0, now - r.last_committed_at):.0f}s"
        rows.append(
            (
                r.consumer,
                "-" if r.last_batch_id is None else r.last_batch_id,
                ago,
                r.last_events,
                *phases(r.last_seconds),
                "-" if r.last_output_files is None else r.last_output_files,
                _size(r.last_output_bytes),
                r.batches,
                r.events,
                r.failures,
                r.held_events,
            )
        )
    header = ("INSTANCE", "LAST BATCH", "AGO", "EVENTS", *(f"{p.upper()} S" for p in PHASES), "FILES", "BYTES",
              "BATCHES", "TOTAL EVENTS", "FAILED", "IN MEMORY")
    lines = ["micro-batches (the last one committed by each instance; seconds per phase, see docs/spark.md)"]
    lines += format_table(header, rows, right=set(range(1, len(header))))
    return lines
