"""The one wrapper around a processor's code, shared by the live workers and recovery."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionLost, PartitionSource
from jetkafka.processors._calls import ask_on_exception, call_hook, deliver_batch

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


class _Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Deciding(BatchEventProcessor):
    def __init__(self, answer: BatchResponse | Exception | None) -> None:
        self.answer = answer

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        return BatchResponse.advance()

    def on_exception(self, source: PartitionSource, exc: Exception) -> BatchResponse | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_failed_batch_is_logged_with_its_offsets_and_the_traceback_only_at_the_first_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("jetkafka.test_calls")
    batch = [_Record(5), _Record(6)]
    skip = BatchResponse.advance()
    with caplog.at_level(logging.ERROR, logger=log.name):
        first = ask_on_exception(Deciding(skip), SOURCE, batch, ValueError("bad"), 1, log=log, failed=_unexpected)
        again = ask_on_exception(Deciding(None), SOURCE, batch, ValueError("bad"), 2, log=log, failed=_unexpected,
                                 what="recovery offsets")
    assert first is skip and again is None
    one, two = caplog.records
    assert one.getMessage() == "t[0]: processor failed on offsets 5..6 (attempt 1): ValueError: bad"
    assert one.exc_info is not None
    assert two.getMessage() == "t[0]: processor failed on recovery offsets 5..6 (attempt 2): ValueError: bad"
    assert two.exc_info is None


def test_an_on_exception_that_raises_leaves_the_decision_to_the_failure_policy() -> None:
    reported: list[tuple[str, Exception]] = []
    answer = ask_on_exception(
        Deciding(RuntimeError("handler broke")), SOURCE, [_Record(5)], ValueError("bad"), 1,
        log=logging.getLogger("jetkafka.test_calls"), failed=lambda hook, exc: reported.append((hook, exc)),
    )
    assert answer is None
    assert [(hook, str(exc)) for hook, exc in reported] == [("on_exception", "handler broke")]


def _unexpected(hook: str, exc: Exception) -> None:
    raise AssertionError(f"{hook} raised {exc!r}")
