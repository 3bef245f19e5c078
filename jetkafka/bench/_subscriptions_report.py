"""The table rows and the settings line of the subscriptions part (:mod:`._subscriptions`).

Each row is a figure of the N processes (the value) against the same figure of the one
process running every channel file (the baseline); the ratio is N processes / one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BENCH = "subscriptions"
MIB = 1024 * 1024

# (key, figure, unit, note from the two setups' results or None)
Note = Callable[[dict[str, Any], dict[str, Any]], str] | None


def _cpu_note(one: dict[str, Any], many: dict[str, Any]) -> str:
    return (f"CPU s from started to every backlog committed: {one['cpu_seconds_backlog']:.1f} against "
            f"{many['cpu_seconds_backlog']:.1f}, {many['events']:,} events processed by each setup")


def _mib(x: Any) -> str:
    return "-" if x is None else f"{x / MIB:,.0f} MiB"


def _zk_note(one: dict[str, Any], many: dict[str, Any]) -> str:
    return (f"server's count (mntr) less its count before; TCP connections from the processes: "
            f"{one['zk_tcp_connections']} against {many['zk_tcp_connections']}")


FIGURES: tuple[tuple[str, str, str, Note], ...] = (
    ("start_s", "time to start all", "s",
     lambda one, many: "launch until every group owns its partitions (of an empty topic)"),
    ("cpu_seconds_to_start", "CPU to start all", "CPU s", lambda one, many: "user + system, launch to started"),
    ("backlog_s", "time to process all backlogs", "s",
     lambda one, many: "from producing the backlog until every group committed it"),
    ("cpu_seconds_per_1000_events", "CPU per 1,000 events", "CPU s", _cpu_note),
    ("idle_cpu_percent", "CPU when idle", "%", lambda one, many: "of one core, after the backlog"),
    ("rss_bytes", "RSS total, idle", "bytes",
     lambda one, many: f"PSS total (shared pages counted once): {_mib(one['pss_bytes'])} against "
     f"{_mib(many['pss_bytes'])}"),
    ("rss_peak_bytes", "RSS total, peak", "bytes", lambda one, many: "sampled every 0.2 s from the launch"),
    ("threads", "threads", "count", None),
    ("zk_sessions", "ZooKeeper sessions", "count",
     lambda one, many: "distinct ephemeral owners of the groups' member nodes"),
    ("zk_connections", "ZooKeeper connections", "count", _zk_note),
    ("broker_tcp_connections", "Kafka broker TCP connections", "count", None),
    ("stop_s", "time to stop all", "s", lambda one, many: "SIGTERM until the last process exited"),
)


def subscription_rows(part: dict[str, Any] | None, row: Callable[..., dict[str, Any]],
                      problem: Callable[[dict[str, Any]], str | None]) -> list[dict[str, Any]]:
    """The part's rows, built with ``_report``'s ``row`` and ``problem``."""
    if not part:
        return []
    n = part.get("settings", {}).get("subscriptions", "N")
    one, many = part.get("one_process", {}), part.get("processes", {})
    why = problem(part)
    if why:
        return [row(BENCH, f"{n} subscriptions", None, "s", note=why)]
    for setup, name in ((one, "one process"), (many, f"{n} processes")):
        why = problem(setup) if setup else "not measured"
        if why:
            return [row(BENCH, f"{n} subscriptions in {name}", None, "s", note=why)]
    rows = []
    for key, figure, unit, note in FIGURES:
        value, base = many.get(key), one.get(key)
        ratio = None if value is None or not base else value / base
        rows.append(row(BENCH, f"{figure}, {n} processes", value, unit, "one process", base, ratio,
                        note(one, many) if note else None))
    unclean = one.get("unclean_exits", []) + many.get("unclean_exits", [])
    if unclean:
        rows[-1]["note"] += f"; not a clean exit: {'; '.join(unclean)}"
    return rows


def settings_line(part: dict[str, Any]) -> str | None:
    s = part.get("settings")
    if not s:
        return None
    rounds = "one round" if s["rounds"] == 1 else f"median of {s['rounds']} rounds, alternating"
    return (f"subscriptions: {s['subscriptions']} channel files (distinct groups) on one topic of "
            f"{s['partitions']} partitions, threads {s['threads']}, no-op processor; one `jetkafka run DIR` against "
            f"{s['subscriptions']} `jetkafka run FILE`, a new topic and new groups for each; once all started, "
            f"{s['events']:,} events of {s['event_bytes']} B produced, read by every group; {rounds}; "
            f"idle figures after {s['steady_s']:g} s idle")
