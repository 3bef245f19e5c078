"""The wait before a retry: growing with each attempt, capped, and spread by jitter.

Every retry in jetkafka waits through :func:`backoff_ms`: a processor that raises
(``channel.error_backoff_ms`` doubling up to ``error_backoff_max_ms``), a recovery batch, a
Spark micro-batch whose ``fn`` failed or whose records could not be stored, and the CloudEvents
dispatcher's HTTP retries (``retry.delay_ms``, exponential or linear, up to ``max_delay_ms``).

Guarantee: the wait is never shorter than the configured back-off for that attempt (the cap
included), and at most :data:`JITTER` (a fifth) longer. Without the spread, the instances of a
group that failed together (ZooKeeper out of reach, a subscriber down) retry together, at the
same moments, for as long as the failure lasts; the spread goes upwards so that a configured
back-off still means "at least this long".
"""

from __future__ import annotations

import random
from typing import Literal

JITTER = 0.2
# 2**62 ms is far past any cap: a larger exponent would only build a huge integer.
_MAX_EXPONENT = 62

Growth = Literal["exponential", "linear"]


def backoff_ms(
    attempt: int,
    base_ms: int,
    max_ms: int,
    growth: Growth = "exponential",
    rng: random.Random | None = None,
) -> int:
    """The wait before retry ``attempt`` (1 for the first): ``base_ms`` doubled (or added, for
    ``linear``) with each attempt, at most ``max_ms``, then up to :data:`JITTER` more."""
    n = max(1, attempt)
    wait = base_ms * n if growth == "linear" else base_ms * 2 ** min(n - 1, _MAX_EXPONENT)
    wait = min(wait, max_ms)
    spread = (rng or random).random() * JITTER * wait
    return int(wait + spread)
