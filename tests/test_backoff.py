"""The one back-off formula: growth, cap, and jitter that only ever lengthens the wait."""

from __future__ import annotations

import random

from jetkafka._backoff import JITTER, backoff_ms


def test_exponential_and_linear_growth_up_to_the_cap_never_below_the_formula() -> None:
    rng = random.Random(7)
    for attempt, formula in zip(range(1, 7), [100, 200, 400, 800, 1000, 1000], strict=True):
        wait = backoff_ms(attempt, 100, 1000, rng=rng)
        assert formula <= wait <= formula * (1 + JITTER)
    for attempt, formula in zip(range(1, 5), [100, 200, 250, 250], strict=True):
        wait = backoff_ms(attempt, 100, 250, "linear", rng=rng)
        assert formula <= wait <= formula * (1 + JITTER)
    assert 5000 <= backoff_ms(10_000, 1, 5000, rng=rng) <= 6000  # no huge integer on the way


def test_instances_failing_together_retry_apart() -> None:
    """The point of the jitter: twenty instances at their fifth attempt, the cap reached, do
    not all wait the same time."""
    waits = {backoff_ms(5, 200, 2000, rng=random.Random(seed)) for seed in range(20)}
    assert len(waits) >= 15 and min(waits) >= 2000 and max(waits) <= 2400
