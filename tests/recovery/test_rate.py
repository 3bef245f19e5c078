"""The token bucket: long-run rate, burst, overdraft by a whole batch."""

from __future__ import annotations

import threading
import time

import pytest

from jetkafka.recovery._rate import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_starts_full_and_refills_up_to_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(1000, 100, clock)
    assert bucket.tokens == 100
    bucket.spend(100)
    assert bucket.delay() == 0
    clock.now += 0.05
    assert bucket.tokens == pytest.approx(50)
    clock.now += 10
    assert bucket.tokens == 100  # a pause never saves up more than the burst


def test_a_batch_may_overdraw_and_the_next_waits_for_it() -> None:
    clock = Clock()
    bucket = TokenBucket(1000, 100, clock)
    bucket.spend(500)  # larger than the burst: delivered whole
    assert bucket.tokens == pytest.approx(-400)
    assert bucket.delay() == pytest.approx(0.4)
    clock.now += 0.4
    assert bucket.delay() == 0


def test_long_run_rate_is_the_configured_one() -> None:
    clock = Clock()
    bucket = TokenBucket(2000, 100, clock)
    start, spent = clock.now, 0
    while clock.now - start < 60:
        clock.now += bucket.delay()  # a caller that is always ready
        bucket.spend(500)
        spent += 500
    elapsed = clock.now - start
    # At most rate * T + burst + one batch.
    assert spent <= 2000 * elapsed + 100 + 500 + 1e-6
    assert spent / elapsed == pytest.approx(2000, rel=0.01)


def test_wait_blocks_until_the_debt_is_paid_and_stops_early() -> None:
    bucket = TokenBucket(100, 10)
    bucket.spend(30)  # 20 in debt: 0.2 s
    started = time.monotonic()
    assert bucket.wait()
    assert 0.15 <= time.monotonic() - started < 1.0
    bucket.spend(100)  # 1 s of debt
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    assert bucket.wait(stop) is False
    assert time.monotonic() - started < 0.6
    assert bucket.wait(timeout=0.05) is False


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="rate and burst must be > 0, got rate=0 burst=10"):
        TokenBucket(0, 10)
    with pytest.raises(ValueError, match="rate and burst must be > 0, got rate=10 burst=0"):
        TokenBucket(10, 0)
