"""The table rows, the side table and the settings line of the ordering part (:mod:`._ordering`).

One-partition rows: seconds to process and commit every record, against Parallel Consumer's
published figure for the same mode (ratio = jetkafka / published: lower is better). Each key
row's note carries key/none and partition/key against their goals, and every row says whether
its run passed its own check: a row that failed it shows why instead of a number. Scale rows:
events/s of 16 partitions over 4 instances, against partition order in the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BENCH = "ordering"
PROCESSOR_LABELS = {"sync": "time.sleep processor", "async": "asyncio processor"}
MODE_LABELS = {"partition": "partition", "key-20": "key, 20 keys", "key-1000": "key, 1,000 keys", "none": "none"}


PUBLISHED_EVENTS = 10_000  # the workload Parallel Consumer's figures are for


def _published(part: dict[str, Any], name: str) -> float | None:
    """Parallel Consumer's figure for the mode; None unless the run had its record count."""
    settings = part.get("settings", {})
    if settings.get("events") != PUBLISHED_EVENTS:
        return None
    published: dict[str, float] = settings.get("published", {})
    return published.get("key" if name.startswith("key") else name)


def _in_order(part: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(processor, mode, row) in the order of the labels (the JSON document sorts its keys)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for kind in PROCESSOR_LABELS:
        rows = part["one_partition"].get(kind, {}).get("rows", {})
        out.extend((kind, name, rows[name]) for name in MODE_LABELS if name in rows)
    return out


def _goal_note(name: str, ratios: dict[str, float | None], goals: dict[str, float]) -> str:
    if not name.startswith("key"):
        return ""
    parts = []
    to_none, from_partition = ratios.get(f"{name}/none"), ratios.get(f"partition/{name}")
    if to_none is not None:
        goal = goals.get("key/none at most", 1.2)
        parts.append(f"key/none {to_none:.2f} (goal <= {goal:g}: {'met' if to_none <= goal else 'missed'})")
    if from_partition is not None:
        goal = goals.get("partition/key at least", 10.0)
        parts.append(f"partition/key {from_partition:.1f} (goal >= {goal:g}: "
                     f"{'met' if from_partition >= goal else 'missed'})")
    return "; ".join(parts)


def ordering_rows(part: dict[str, Any] | None, row: Callable[..., dict[str, Any]],
                  problem: Callable[[dict[str, Any]], str | None]) -> list[dict[str, Any]]:
    """The part's rows, built with ``_report``'s ``row`` and ``problem``."""
    if not part:
        return []
    why = problem(part)
    if why:
        return [row(BENCH, "one partition, all modes", None, "s", note=why)]
    events = part["settings"]["events"]
    goals = part["settings"].get("goals", {})
    out = []
    threads = part["settings"].get("sync_threads")
    for kind, name, r in _in_order(part):
        ratios = part["one_partition"][kind]["ratios"]
        how = PROCESSOR_LABELS[kind] + (f", {threads} threads" if kind == "sync" else "")
        figure = f"{events:,} records, 1 partition, {MODE_LABELS.get(name, name)}; {how}"
        published = _published(part, name)
        if "error" in r:
            out.append(row(BENCH, figure, None, "s", "Parallel Consumer (published)" if published else None,
                           published, note=f"FAILED: {r['error']}"))
            continue
        note = f"checked: {r['processed']:,} processed, each once" + (
            ", key order held" if r["ordering"] == "key" else
            ", offset order held" if r["ordering"] == "partition" else "")
        if "batches" in r:
            note += f"; {r['batches']:,} batches"
        goal = _goal_note(name, ratios, goals)
        note = f"{note}; {goal}" if goal else note
        out.append(row(BENCH, figure, r["seconds"], "s", "Parallel Consumer (published)" if published else None,
                       published, r["seconds"] / published if published else None, note))
    scale = part.get("scale", {})
    why = problem(scale) if scale else None
    if why:
        out.append(row(BENCH, "16 partitions x 4 instances", None, "events/s", note=why))
        return out
    s = scale.get("settings", {})
    base = next((r for r in scale.get("rows", []) if r["ordering"] == "partition" and "error" not in r), None)
    for r in scale.get("rows", []):
        figure = (f"{s.get('partitions')} partitions x {s.get('instances')} instances, "
                  f"{s.get('delay_s', 0) * 1000:g} ms/record, {r['ordering']}")
        if "error" in r:
            out.append(row(BENCH, figure, None, "events/s", note=f"FAILED: {r['error']}"))
            continue
        out.append(row(BENCH, figure, r["events_per_s"], "events/s",
                       "partition order" if base and r is not base else None,
                       base["events_per_s"] if base and r is not base else None,
                       r.get("ratio_to_partition") if r is not base else None,
                       f"checked: {r['processed']:,} processed, each once; {s.get('events', 0):,} records in "
                       f"{r['seconds']:.1f} s"))
    return out


def side_table(part: dict[str, Any] | None) -> list[str]:
    """Seconds per mode and processor beside Parallel Consumer's, one line per mode."""
    from jetkafka.ops._tables import format_table

    if not part or "one_partition" not in part:
        return []
    kinds = [k for k in PROCESSOR_LABELS if k in part["one_partition"]]
    rows = []
    for name in MODE_LABELS:
        cells: list[str] = [MODE_LABELS[name]]
        for kind in kinds:
            r = part["one_partition"][kind]["rows"].get(name, {})
            cells.append("FAILED" if "error" in r else "-" if "seconds" not in r else f"{r['seconds']:.2f} s")
        bound = part["settings"].get("io_bound_s", {}).get(name)
        cells.append("-" if bound is None else f"{bound:.2f} s")
        published = _published(part, name)
        cells.append("-" if published is None else f"{published:g} s")
        rows.append(tuple(cells))
    s = part["settings"]
    title = (f"ordering: {s['events']:,} records on 1 partition, 0-{s['max_delay_s'] * 1000:g} ms of I/O each "
             "(seconds from the channel's start to the last commit landing):")
    lines = ["", title]
    heads = ("MODE", *(PROCESSOR_LABELS[k].upper() for k in kinds), f"I/O ALONE, {s['sync_threads']} AT ONCE",
             "PARALLEL CONSUMER (PUBLISHED)")
    lines.extend(format_table(heads, rows, right=set(range(1, len(heads)))))
    lines.append(f"I/O alone: the least time with {s['sync_threads']} records at once and no consumer cost; under key "
                 "a key's records run one after the other, so the key with the most I/O bounds the run")
    return lines


def settings_line(part: dict[str, Any] | None) -> str | None:
    if not part or "settings" not in part:
        return None
    s = part["settings"]
    line = (f"ordering: {s['events']:,} records on 1 partition, 0-{s['max_delay_s'] * 1000:g} ms simulated I/O "
            f"per record (seeded {s['seed']}), synchronous processor with {s['sync_threads']} threads, asyncio "
            "processor with max_in_flight_per_partition 1,000; timed from the channel's start to the last commit; "
            f"Parallel Consumer figures from {s['published_source']}")
    sc = part.get("scale", {}).get("settings")
    if sc:
        line += (f"; scale: {sc['events']:,} records over {sc['partitions']} partitions, {sc['instances']} "
                 f"jetkafka run processes with {sc['threads']} threads each, {sc['delay_s'] * 1000:g} ms per record, "
                 f"{sc['keys']:,} keys, timed from the first produce to the last commit")
    return line
