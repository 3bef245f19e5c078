"""End to end: spans exported over real OTLP/HTTP, decoded from protobuf by a receiver the test
runs, with the ``OTEL_*`` variables winning over the ``tracing:`` section."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason=SKIP_REASON)
pytest.importorskip("cloudevents", reason="the cloudevents extra is not installed")

from tests.tracing.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.tracing.traced_run import GROUP, PRODUCER_1, PRODUCER_2

REPO = Path(__file__).resolve().parents[2]
CONSUMER, CLIENT, INTERNAL = 5, 3, 1  # opentelemetry.proto.trace.v1.Span.SpanKind


def render(spans: list[ReceivedSpan]) -> str:
    """The spans as an indented tree, children under parents (what docs/operations.md shows)."""
    by_id = {s.span_id: s for s in spans}
    lines: list[str] = []

    def show(span: ReceivedSpan, depth: int) -> None:
        parent = "" if span.parent_span_id in by_id or not span.parent_span_id else f" parent={span.parent_span_id} (remote)"
        links = "".join(f" link={t}/{s}" for t, s in span.links)
        lines.append(f"{'  ' * depth}{span.name}  trace={span.trace_id} span={span.span_id}{parent}{links}")
        for key, value in sorted(span.attributes.items()):
            lines.append(f"{'  ' * depth}    {key}={value!r}")
        for child in sorted((c for c in spans if c.parent_span_id == span.span_id), key=lambda c: c.start_ns):
            show(child, depth + 1)

    for root in sorted((s for s in spans if s.parent_span_id not in by_id), key=lambda s: s.start_ns):
        show(root, 0)
    return "\n".join(lines)


def test_batch_spans_reach_an_otlp_http_receiver_with_their_attributes_links_and_parents() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SERVICE_NAME"] = "orders-consumer"  # wins over tracing.service_name
    env["PYTHONPATH"] = str(REPO)
    with OtlpReceiver() as receiver:
        run = subprocess.run(
            [sys.executable, "-m", "tests.tracing.traced_run", receiver.endpoint],
            check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )
        assert run.returncode == 0, run.stderr
        spans = list(receiver.spans)
        paths = set(receiver.paths)
    print(render(spans))  # shown with -s; the trace in docs/operations.md is this output
    print(run.stderr)

    assert paths == {"/v1/traces"}
    assert {s.service for s in spans} == {"orders-consumer"}
    single, batch = sorted((s for s in spans if s.name == "process orders"), key=lambda s: s.start_ns)
    for span, first, count in ((single, 40, 1), (batch, 41, 3)):
        assert span.kind == CONSUMER
        assert span.attributes == {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": "orders",
            "messaging.destination.partition.id": "3",
            "messaging.consumer.group.name": GROUP,
            "messaging.kafka.offset": first,
            "messaging.batch.message_count": count,
            "jetkafka.response": "advance",
        }
    # One record: a child of its producer's span, in the producer's trace.
    assert (single.trace_id, single.parent_span_id) == (f"{PRODUCER_1[0]:032x}", f"{PRODUCER_1[1]:016x}")
    # Three: a new trace, linked to both producers.
    assert batch.parent_span_id == "" and batch.links == [
        (f"{PRODUCER_1[0]:032x}", f"{PRODUCER_1[1]:016x}"), (f"{PRODUCER_2[0]:032x}", f"{PRODUCER_2[1]:016x}")
    ]
    posts = [s for s in spans if s.name == "POST"]
    assert len(posts) == 4 and all(p.kind == CLIENT for p in posts)
    assert sorted(p.parent_span_id for p in posts) == sorted([single.span_id] + [batch.span_id] * 3)
    assert {s.name for s in spans if s.kind == INTERNAL} == {"partitions taken", "partition released orders"}
    taken = next(s for s in spans if s.name == "partitions taken")
    assert taken.attributes["jetkafka.partitions"] == ["orders[3]"]
    # The log lines of a batch carry its ids; a line outside any span carries "-".
    assert f"[MainThread] trace={single.trace_id} span={single.span_id} orders[3]: delivering offsets 40..40" in run.stderr
    assert f"trace={batch.trace_id} span={batch.span_id} orders[3]: delivering offsets 41..43" in run.stderr
    assert "trace=- span=- delivered 4 requests" in run.stderr
    assert "not exported" not in run.stderr  # every span reached the receiver, and the stop says nothing
