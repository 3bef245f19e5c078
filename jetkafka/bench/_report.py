"""The benchmark's outputs: the table, the JSON document and the PNG chart.

Every table row is one figure with its baseline and ``ratio = value / baseline`` (for
throughput higher is better, for latency and memory lower is better). A part that could not
run shows why instead of a number.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from jetkafka.bench._ordering_report import ordering_rows, side_table
from jetkafka.bench._ordering_report import settings_line as ordering_settings
from jetkafka.bench._subscriptions_report import settings_line as subscription_settings
from jetkafka.bench._subscriptions_report import subscription_rows

MIB = 1024 * 1024


def machine_info() -> dict[str, Any]:
    import confluent_kafka

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "librdkafka": confluent_kafka.libversion()[0],
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()),
    }
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 1024**3, 1)
    except Exception:  # noqa: BLE001 - best effort: the field stays empty
        info["memory_gib"] = None
    try:
        from importlib.metadata import version

        info["kazoo"] = version("kazoo")
    except Exception:  # noqa: BLE001 - best effort: the field stays empty
        info["kazoo"] = None
    return info


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f} ev/s"


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:,.0f} ms" if x < 10 else f"{x:,.1f} s"


def _ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline


def _row(bench: str, figure: str, value: Any, unit: str, baseline: str | None = None,
         baseline_value: Any = None, ratio: float | None = None, note: str | None = None) -> dict[str, Any]:
    return {
        "benchmark": bench,
        "figure": figure,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "note": note,
    }


def _problem(part: dict[str, Any]) -> str | None:
    if "unavailable" in part:
        return f"not run: {part['unavailable']}"
    if "error" in part:
        return f"failed: {part['error']}"
    return None


def _client_note(row: dict[str, Any]) -> str:
    """The from-first-event figure, jetkafka's rate before its last commit landed, and the CPU
    cost, for the note column of a throughput row."""
    busy = row["from_first_event_events_per_s"]
    ratio = row.get("from_first_event_ratio")
    text = f"from first event {busy:,.0f}/s" + (f" (x{ratio:.2f})" if ratio is not None else "")
    processed = row.get("to_last_batch_ratio")
    if processed is not None:
        text += f"; to last batch {row['to_last_batch_events_per_s']:,.0f}/s (x{processed:.2f})"
    return f"{text}; CPU {row['cpu_seconds_per_million']:.2f} s per 1M"


def _reader_rows(bench: str, part: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The rows of a part that sets jetkafka's channels against the plain loop."""
    if not part:
        return []
    problem = _problem(part)
    if problem:
        return [_row(bench, "events/s", None, "events/s", note=problem)]
    rows = []
    for r in part["rows"]:
        note = _client_note(r)
        if r["variant"] == "plain":
            rows.append(_row(bench, r["label"], r["events_per_s"], "events/s", note=f"upper bound; {note}"))
        else:
            rows.append(_row(bench, r["label"], r["events_per_s"], "events/s", "plain loop",
                             r["baseline_events_per_s"], r["ratio"], note))
    return rows


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = _reader_rows("throughput", results.get("throughput"))
    rows += _reader_rows("client cost", results.get("client"))
    rows += _spark_rows(results.get("spark"))
    rows += _latency_rows(results.get("latency"))
    ho = results.get("handoff")
    if ho:
        jk, cg = ho.get("jetkafka", {}), ho.get("consumer_group", {})
        for kind in ("graceful", "kill"):
            for q in ("p50", "p99"):
                label = f"hand-off after {'SIGTERM' if kind == 'graceful' else 'SIGKILL'}, {q}"
                value = jk.get(kind, {}).get(f"{q}_s")
                base = cg.get(kind, {}).get(f"{q}_s")
                note = _problem(jk) or jk.get(kind, {}).get("error")
                if base is None:
                    why = _problem(cg) or cg.get(kind, {}).get("error") or "no consumer-group figure"
                    note = f"{note}; consumer group: {why}" if note else f"consumer group: {why}"
                rows.append(_row("hand-off", label, value, "s", "consumer group (cooperative-sticky)", base,
                                 _ratio(value, base), note))
    sc = results.get("scale")
    if sc:
        problem = _problem(sc)
        if problem:
            rows.append(_row("scale", "balance time", None, "s", note=problem))
        else:
            for r in sc["rows"]:
                label = f"balance {r['partitions']} partitions over {r['instances']} instance(s)"
                if "error" in r:
                    rows.append(_row("scale", label, None, "s", note=f"failed: {r['error']}"))
                    continue
                rows.append(_row("scale", label, r["balance_s"], "s",
                                 note=f"ZooKeeper requests: {r.get('zk_requests_per_batch', 0):.2f}/batch, "
                                 f"{r.get('zk_requests_per_partition_taken', 0):.1f}/partition taken"))
    mem = results.get("memory")
    if mem:
        jk, plain = mem.get("jetkafka", {}), mem.get("plain", {})
        events = mem.get("settings", {}).get("events", 0)
        if "rss_peak_bytes" in jk:
            base = plain.get("rss_peak_bytes")
            rows.append(_row("memory", f"peak RSS, {events:,}-event backlog", jk["rss_peak_bytes"], "bytes",
                             "plain confluent-kafka consumer", base, _ratio(jk["rss_peak_bytes"], base),
                             note=f"RSS at start {jk['rss_start_bytes'] / MIB:,.0f} MiB"
                             + ("" if base else f"; baseline {_problem(plain) or '-'}")))
        else:
            rows.append(_row("memory", "peak RSS", None, "bytes", note=_problem(jk) or "-"))
    rows += subscription_rows(results.get("subscriptions"), _row, _problem)
    rows += ordering_rows(results.get("ordering"), _row, _problem)
    return rows


# What the end-to-end run should reach against each Spark baseline (issue 21).
SPARK_TARGETS = {"arrow": 0.5, "rows": 2.0, "loop": 1.0}


def _spark_rows(sp: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not sp:
        return []
    problem = _problem(sp)
    if problem:
        return [_row("spark", "events/s into DataFrames", None, "events/s", note=problem)]
    base = sp["rows"]["events_per_s"]
    arrow = sp["arrow"]["events_per_s"]
    rows = [
        _row("spark", "row by row (createDataFrame(rows))", base, "events/s", note="baseline"),
        _row("spark", "micro-batch processor path (Arrow)", arrow, "events/s", "row by row", base, _ratio(arrow, base)),
    ]
    loop = sp.get("loop", {})
    loop_rate = loop.get("events_per_s")
    if loop_rate is not None:
        rows.append(_row("spark", "hand-written loop: consumer -> Arrow -> DataFrame -> commit", loop_rate,
                         "events/s", "row by row", base, _ratio(loop_rate, base),
                         note=f"{_count(loop['micro_batches'], 'micro-batch')}, a Kafka commit after each"))
    elif loop:
        rows.append(_row("spark", "hand-written loop", None, "events/s", note=_problem(loop) or "-"))
    e2e = sp.get("end_to_end", {})
    if "events_per_s" not in e2e:
        rows.append(_row("spark", "end to end", None, "events/s", note=_problem(e2e) or "-"))
        return rows
    value = e2e["events_per_s"]
    note = f"Kafka -> channel -> DataFrames, {_count(e2e['micro_batches'], 'micro-batch')}, committed"
    for key, short, baseline, baseline_value in (
        ("rows", "row by row", "row by row", base),
        ("arrow", "Arrow path", "micro-batch processor path (Arrow)", arrow),
        ("loop", "hand-written loop", "hand-written loop", loop_rate),
    ):
        if baseline_value is None:
            continue
        rows.append(_row("spark", f"end to end / {short}", value, "events/s", baseline, baseline_value,
                         _ratio(value, baseline_value), note=f"target ratio >= {SPARK_TARGETS[key]:g}; {note}"))
    if "micro_batches_in_memory_at_peak" in e2e:
        rows.append(_row("spark", "end to end: micro-batches in memory at peak", e2e["micro_batches_in_memory_at_peak"],
                         "micro-batches",
                         note=f"peak held {e2e['peak_held_events']:,} events; max_events {e2e['max_events']:,}, "
                              f"up to {e2e.get('backlog_max_events', e2e['max_events']):,} while Spark is busy"))
    return rows


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "es" if what.endswith("h") else "s")


def _latency_rows(lt: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not lt:
        return []
    problem = _problem(lt)
    if problem:
        return [_row("latency", "production to commit", None, "s", note=problem)]
    settings, production = lt["settings"], lt["production"]
    target = settings["target_s"]
    rate = f"produced {production['events_per_s']:,.0f}/s of {settings['rate_events_per_s']:,}/s"
    if production["fell_behind"]:
        rate += f": the producer fell behind (up to {production['max_behind_s']:.2f} s)"
    rows = []
    for q in ("p50", "p99", "max"):
        note = f"{lt['records']:,} records, {_count(lt['micro_batches'], 'micro-batch')}; {rate}" if q == "p50" else None
        if q == "p50" and lt.get("unmeasured"):
            note = f"{note}; {lt['unmeasured']:,} records not committed in time"
        rows.append(_row("latency", f"production to commit, {q}", lt[f"{q}_s"], "s",
                         "target max_interval_ms + 1 s", target, _ratio(lt[f"{q}_s"], target), note))
    return rows


def _fmt_value(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "events/s":
        return _rate(value)
    if unit == "s":
        return _secs(value)
    if unit == "bytes":
        return f"{value / MIB:,.0f} MiB"
    if unit == "micro-batches":
        return f"{value:.2f}"
    if unit == "CPU s":
        return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.1f} s"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "count":
        return f"{value:,g}"
    return str(value)


def render_table(report: dict[str, Any]) -> str:
    from jetkafka.ops._tables import format_table

    m = report["machine"]
    load = report.get("load_average", {})
    lines = [
        f"jetkafka bench{' --quick' if report.get('quick') else ''}: {report['started']}, {report['seconds']:.0f} s",
        (
            f"machine: {m['cpus']} CPUs, {m.get('memory_gib')} GiB, {m['platform']}, Python {m['python']}, "
            f"librdkafka {m['librdkafka']}, kazoo {m.get('kazoo')}"
        ),
        f"load average (1 min): {load.get('start', ['?'])[0]} at start, {load.get('end', ['?'])[0]} at end",
        f"broker: {report['broker']}; ZooKeeper {report['zookeeper']}",
        "",
    ]
    rows = []
    for r in report["table"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        base = "-"
        if r["baseline"]:
            base = f"{r['baseline']}: {_fmt_value(r['baseline_value'], r['unit'])}"
        rows.append((r["benchmark"], r["figure"], _fmt_value(r["value"], r["unit"]), base, ratio, r["note"] or ""))
    lines.extend(format_table(("BENCH", "FIGURE", "VALUE", "BASELINE", "RATIO", "NOTE"), rows, right={2, 4}))
    lines.append("")
    lines.append("ratio = value / baseline: higher is better for events/s, lower for latency and memory")
    if "subscriptions" in report["results"]:
        lines.append("subscriptions: value = the N processes, baseline = the one process, ratio = N processes / one")
    lines.extend(_settings_lines(report["results"]))
    return "\n".join(lines)


def _settings_lines(results: dict[str, Any]) -> list[str]:
    out = [""]
    tp = results.get("throughput", {}).get("settings")
    if tp:
        d = tp["channel_defaults"]
        out.append(
            f"throughput: {tp['events']:,} events of {tp['event_bytes']} B, {tp['partitions']} partitions, "
            f"median of {tp['repeat']} runs each, alternating, timed from the assignment; jetkafka defaults: batch_max_events "
            f"{d['batch_max_events']}, buffer_max_events {d['buffer_max_events']}, threads {d['threads']}"
        )
    cc = results.get("client", {}).get("settings")
    if cc:
        where = f"all threads on CPU {cc['cpu']}" if cc["cpu"] is not None else "threads not pinned"
        out.append(
            f"client cost: {cc['events']:,} events of {cc['event_bytes']} B built in the process (no broker fetch), "
            f"{cc['partitions']} partitions, {where}, median of {cc['repeat']} runs each, alternating"
        )
    ho = results.get("handoff", {}).get("settings")
    if ho:
        cg = results.get("handoff", {}).get("consumer_group", {}).get("settings", {})
        out.append(
            f"hand-off: {ho['instances']} instances, {ho['partitions']} partitions, {ho['produce_rate_events_per_s']} "
            f"events/s produced, {ho['trials']} trials per signal; ZooKeeper session timeout "
            f"{ho['zookeeper_session_timeout_s']:g} s; consumer group: session.timeout.ms "
            f"{cg.get('session.timeout.ms', '-')}, broker {cg.get('broker', '-')}"
        )
    sp = results.get("spark", {}).get("settings")
    if sp:
        workload = sp.get("workload", "noop")
        what = ("the example's JSON events, aggregated per minute into a ParquetSink" if workload == "aggregate"
                else "each DataFrame written to noop")
        out.append(f"spark: {sp['events']:,} records read from Kafka, {sp['master']}, chunks of "
                   f"{sp.get('chunk_events', '-')}, best of {sp['repeat']}; workload {workload}: {what}; "
                   f"end to end and the loop in micro-batches of max_events {sp.get('max_events', 0):,}")
    lt = results.get("latency", {}).get("settings")
    if lt:
        out.append(f"latency: the example's JSON events at {lt['rate_events_per_s']:,}/s for {lt['seconds']:g} s into "
                   f"{lt['partitions']} partitions; channel threads {lt['channel']['threads']}, batch_max_events "
                   f"{lt['channel']['batch_max_events']:,}; max_events {lt['max_events']:,}, max_interval_ms "
                   f"{lt['max_interval_ms']:,}, {lt['master']}; per record: commit landed (read every "
                   f"{lt['poll_s'] * 1000:g} ms) minus CreateTime")
    mem = results.get("memory", {}).get("settings")
    if mem:
        d = mem["channel_defaults"]
        out.append(f"memory: {mem['events']:,} events of {mem['event_bytes']} B over {mem['partitions']} partitions; "
                   f"buffer_max_events {d['buffer_max_events']}, buffer_max_bytes {d['buffer_max_bytes']:,} per partition"
                   + (f"; {mem['capped']}" if mem.get("capped") else ""))
    subs = subscription_settings(results.get("subscriptions", {}))
    if subs:
        out.append(subs)
    ordering = ordering_settings(results.get("ordering"))
    if ordering:
        out.append(ordering)
        out.extend(side_table(results.get("ordering")))
    sc = results.get("scale")
    if sc and "rows" in sc:
        from jetkafka.ops._tables import format_table

        out.append("")
        out.append("scale (in-process channels, each with its own ZooKeeper session):")
        rows = []
        for r in sc["rows"]:
            if "error" in r:
                rows.append((r["instances"], r["partitions"], "failed", "", "", "", ""))
                continue
            rows.append((
                r["instances"], r["partitions"], _secs(r["balance_s"]), _secs(r["settled_s"]),
                _num(r.get("zk_requests_per_partition_taken")), _num(r.get("zk_requests_per_batch")),
                _num(r.get("client_requests_per_batch")),
            ))
        out.extend(format_table(
            ("INSTANCES", "PARTITIONS", "BALANCED", "SETTLED", "ZK REQ/PARTITION TAKEN", "ZK REQ/BATCH", "CLIENT REQ/BATCH"),
            rows, right={0, 1, 2, 3, 4, 5, 6}))
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def write_png(report: dict[str, Any], path: str) -> str | None:
    """Two panels: throughput, hand-off latency. Returns why not, when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'jetkafka[bench]')"
    results = report["results"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.8))
    tp = results.get("throughput", {})
    if "rows" in tp:
        labels = [r["label"].replace("jetkafka, ", "jetkafka\n").replace("plain confluent-kafka loop", "plain\nloop")
                  .replace(", batch_max_events", "\nbatch") for r in tp["rows"]]
        values = [r["events_per_s"] / 1000 for r in tp["rows"]]
        colors = ["#888888" if r["variant"] == "plain" else "#2b6cb0" for r in tp["rows"]]
        bars = left.bar(range(len(values)), values, color=colors)
        for bar, r in zip(bars, tp["rows"], strict=True):
            text = f"{r['events_per_s'] / 1000:,.0f}k"
            if r.get("ratio") is not None:
                text += f"\n×{r['ratio']:.2f}"
            left.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                          fontsize=8)
        left.set_xticks(range(len(values)), labels, fontsize=8)
        left.set_ylabel("thousand events/s (median)")
        s = tp["settings"]
        left.set_title(f"Throughput: {s['events']:,} events of {s['event_bytes']} B, {s['partitions']} partitions,\n"
                       "no-op processor (×: ratio to the plain loop)", fontsize=9)
        left.margins(y=0.2)
    else:
        left.text(0.5, 0.5, _problem(tp) or "throughput not run", ha="center", va="center", wrap=True)
        left.set_axis_off()
    ho = results.get("handoff", {})
    groups = []
    for who, name in (("jetkafka", "jetkafka"), ("consumer_group", "consumer group")):
        for kind, sig in (("graceful", "SIGTERM"), ("kill", "SIGKILL")):
            fig_ = ho.get(who, {}).get(kind, {})
            if "p50_s" in fig_:
                groups.append((f"{name}\n{sig}", fig_["p50_s"], fig_["p99_s"]))
    if groups:
        xs = range(len(groups))
        w = 0.38
        b1 = right.bar([x - w / 2 for x in xs], [g[1] for g in groups], w, label="p50", color="#2f855a")
        b2 = right.bar([x + w / 2 for x in xs], [g[2] for g in groups], w, label="p99", color="#c05621")
        for bar in (*b1, *b2):
            right.annotate(f"{bar.get_height():.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                           ha="center", va="bottom", fontsize=8)
        right.set_xticks(list(xs), [g[0] for g in groups], fontsize=8)
        right.set_ylabel("seconds to the first event at the new owner")
        right.legend(fontsize=8)
        s = ho["settings"]
        cg = ho.get("consumer_group", {}).get("settings", {})
        right.set_title(f"Hand-off latency: {s['trials']} trials per signal, {s['partitions']} partitions, "
                        f"2 instances; ZooKeeper session {s['zookeeper_session_timeout_s']:g} s;\nconsumer group "
                        f"on {cg.get('broker', '-')}, session.timeout.ms {cg.get('session.timeout.ms', '-')}",
                        fontsize=9)
        right.margins(y=0.15)
    else:
        why = _problem(ho.get("jetkafka", {})) if ho else "hand-off not run"
        right.text(0.5, 0.5, why or "hand-off not run", ha="center", va="center", wrap=True)
        right.set_axis_off()
    m = report["machine"]
    load = report.get("load_average", {})
    fig.suptitle(
        f"jetkafka bench — {m['cpus']} CPUs, {m.get('memory_gib')} GiB, Python {m['python']}, librdkafka "
        f"{m['librdkafka']}; broker {report['broker']}; ZooKeeper {report['zookeeper']}; "
        f"load average {load.get('start', ['?'])[0]}–{load.get('end', ['?'])[0]}",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_json(report: dict[str, Any]) -> None:
    import json

    json.dump(report, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
