"""The one wrapper around a processor's code, shared by the live workers and recovery."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionLost, PartitionSource
from jetkafka.processors.calls import call_hook, deliver_batch

SOURCE = PartitionSource("t", 0, 5, 5, 6)


class Scripted(BatchEventProcessor):
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome  # type: ignore[no-any-return]

    def on_idle(self, source: PartitionSource) -> BatchResponse | None:
        raise ValueError("idle broke")


def test_a_batch_ends_in_exactly_one_of_response_loss_or_failure() -> None:
    advance = BatchResponse.advance()
    assert deliver_batch(Scripted(advance), SOURCE, EventBatch([])).response is advance
    lost = deliver_batch(Scripted(PartitionLost("t", 0, "gone")), SOURCE, EventBatch([]))
    assert lost.response is None and lost.failure is None and lost.lost is not None and lost.lost.reason == "gone"
    failed = deliver_batch(Scripted(RuntimeError("boom")), SOURCE, EventBatch([]))
    assert isinstance(failed.failure, RuntimeError) and failed.response is None and failed.lost is None
    wrong = deliver_batch(Scripted("advance"), SOURCE, EventBatch([]))
    assert isinstance(wrong.failure, TypeError) and "must return a BatchResponse" in str(wrong.failure)


def test_an_interrupt_from_user_code_is_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt):
        deliver_batch(Scripted(KeyboardInterrupt()), SOURCE, EventBatch([]))


def test_a_hook_that_raises_is_reported_and_answers_none() -> None:
    seen: list[tuple[str, str]] = []
    answer = call_hook(Scripted(None), "on_idle", SOURCE, failed=lambda name, exc: seen.append((name, str(exc))))
    assert answer is None and seen == [("on_idle", "idle broke")]
