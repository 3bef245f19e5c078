"""logging.format json: one JSON object per line, with the worker's partition and offset and the trace id."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from jetkafka._log_context import done_working, working_on
from jetkafka.ops._log_format import JsonFormatter, WorkContextFilter


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(WorkContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.json_log")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def entries(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_each_record_is_one_json_object_on_one_line(json_log) -> None:
    logger, out = json_log
    logger.info('two\nlines and a quote " in %s', "it")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    first, second = entries(out)
    assert first["message"] == 'two\nlines and a quote " in it'
    assert first["level"] == "INFO" and first["logger"] == "tests.json_log" and first["time"].endswith("Z")
    assert "partition" not in first and "trace_id" not in first
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exception"]


def test_records_logged_during_a_turn_carry_that_threads_partition_and_offset(json_log) -> None:
    logger, out = json_log

    def worker(partition: int) -> None:
        working_on(("orders", partition), 100 + partition)
        logger.info("in a batch")
        done_working()
        logger.info("between turns")

    threads = [threading.Thread(target=worker, args=(p,)) for p in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    in_batch = sorted((e["topic"], e["partition"], e["offset"]) for e in entries(out) if e["message"] == "in a batch")
    assert in_batch == [("orders", 1, 101), ("orders", 2, 102)]
    assert all("partition" not in e for e in entries(out) if e["message"] == "between turns")


def test_extra_fields_win_over_the_context(json_log) -> None:
    logger, out = json_log
    working_on(("orders", 1), 5)
    try:
        logger.info("explicit", extra={"topic": "payments", "partition": 7, "offset": 9})
    finally:
        done_working()
    (entry,) = entries(out)
    assert (entry["topic"], entry["partition"], entry["offset"]) == ("payments", 7, 9)


def test_the_current_spans_trace_id_is_a_field(json_log) -> None:
    # OpenTelemetry comes with the tracing extra; without it records simply carry no trace id.
    trace = pytest.importorskip("opentelemetry.trace")
    logger, out = json_log
    context = trace.SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    with trace.use_span(trace.NonRecordingSpan(context)):
        logger.info("traced")
    logger.info("untraced")
    traced, untraced = entries(out)
    assert traced["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and traced["span_id"] == "00f067aa0ba902b7"
    assert "trace_id" not in untraced and "span_id" not in untraced


def test_tracings_placeholder_ids_are_left_out(json_log) -> None:
    from jetkafka._tracing._logs import install_trace_ids

    install_trace_ids()  # as jetkafka run does with tracing on: "-" on records outside a span
    logger, out = json_log
    logger.info("outside a span")
    (entry,) = entries(out)
    assert "trace_id" not in entry and "span_id" not in entry
