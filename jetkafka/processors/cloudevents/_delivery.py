"""Delivery settings of an HTTP subscription: the retry policy, and one POST attempt.

HTTP client: ``requests`` (already the client the CloudEvents SDK documents), one ``Session``
per worker thread over urllib3's keep-alive connection pool; ``Session`` is not documented as
thread-safe, so threads never share one, and each partition's thread reuses its connections.

The policy (``retry:`` under the processor's options):

- ``count`` retries after the first attempt (so ``count + 1`` attempts at most);
- before retry *n* (1-based) the wait is ``delay_ms * 2**(n-1)`` (``exponential``) or
  ``delay_ms * n`` (``linear``), never more than ``max_delay_ms``;
- a 429 or 503 answer with ``Retry-After`` (seconds or an HTTP date) waits at least that long,
  but never more than ``retry_after_max_ms`` (``0`` ignores Retry-After);
- transport errors (refused, reset, timed out) are always retried; HTTP statuses only when
  listed in ``retry_on``; any other non-2xx answer is final at once.
"""

from __future__ import annotations

import difflib
import email.utils
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from jetkafka._backoff import Growth
from jetkafka._backoff import backoff_ms as _backoff_ms

# Knative's retried set: 404 (a subscriber not deployed yet), 408, 409, 429 and every 5xx.
DEFAULT_RETRY_ON: tuple[int | str, ...] = (404, 408, 409, 429, "5xx")
RETRY_KEYS = ("count", "backoff", "delay_ms", "max_delay_ms", "retry_after_max_ms", "timeout_ms", "retry_on")
BODY_KEPT = 768  # response bytes kept for the dead-letter extension: 1,024 base64 characters


def invalid(path: str, problem: str, fix: str) -> ValueError:
    """The error for an option a user got wrong: where, what, and how to fix it."""
    # One line: the loader adds its own "fix:" line after whatever the constructor raised.
    return ValueError(f"processor.options.{path}: {problem}; {fix}")


def whole(path: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(path, f"expected a whole number, got {value!r}", f"write a number in {low}..{high}")
    if not low <= value <= high:
        raise invalid(path, f"{value} is out of range {low}..{high}", f"write a number in {low}..{high}")
    return value


def _status_codes(value: Any) -> frozenset[int]:
    if isinstance(value, (str, int)) or not isinstance(value, Iterable):
        raise invalid("retry.retry_on", f"expected a list, got {value!r}", "write e.g. retry_on: [404, 429, 5xx]")
    codes: set[int] = set()
    for item in value:
        text = str(item).strip().lower()
        if isinstance(item, int) and not isinstance(item, bool):
            low = high = item
        elif re.fullmatch(r"[1-5]xx", text):
            low, high = int(text[0]) * 100, int(text[0]) * 100 + 99
        elif m := re.fullmatch(r"(\d{3})\s*-\s*(\d{3})", text):
            low, high = int(m[1]), int(m[2])
        else:
            raise invalid(
                "retry.retry_on", f"{item!r} is not a status code", "write codes (503), classes (5xx) or ranges (500-504)"
            )
        if not 100 <= low <= high <= 599:
            raise invalid("retry.retry_on", f"{item!r} is not within 100..599", "write HTTP status codes")
        if low <= 299 and high >= 200:
            raise invalid("retry.retry_on", f"{item!r} includes 2xx, which means delivered", "remove 2xx codes")
        codes.update(range(low, high + 1))
    return frozenset(codes)


@dataclass(frozen=True)
class RetryPolicy:
    count: int = 3
    backoff: Growth = "exponential"
    delay_ms: int = 500
    max_delay_ms: int = 30_000
    retry_after_max_ms: int = 60_000
    timeout_ms: int = 10_000
    retry_on: frozenset[int] = field(default_factory=lambda: _status_codes(DEFAULT_RETRY_ON), repr=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> RetryPolicy:
        """Build from the ``retry:`` mapping, raising one clear ``ValueError`` per mistake."""
        if options is None:
            return cls()
        if not isinstance(options, Mapping):
            raise invalid("retry", f"expected a mapping, got {options!r}", "write retry: {count: 3, delay_ms: 500}")
        for key in options:
            if key not in RETRY_KEYS:
                close = difflib.get_close_matches(str(key), RETRY_KEYS, n=1)
                hint = f"rename it to {close[0]!r}" if close else f"use only {', '.join(RETRY_KEYS)}"
                raise invalid(f"retry.{key}", "unknown option", hint)
        backoff = options.get("backoff", cls.backoff)
        if backoff not in ("exponential", "linear"):
            raise invalid("retry.backoff", f"{backoff!r} is not exponential or linear", "write backoff: exponential")
        delay = whole("retry.delay_ms", options.get("delay_ms", cls.delay_ms), 0, 3_600_000)
        max_delay = whole("retry.max_delay_ms", options.get("max_delay_ms", max(delay, cls.max_delay_ms)), 0, 86_400_000)
        if max_delay < delay:
            raise invalid(
                "retry.max_delay_ms", f"{max_delay} is smaller than delay_ms ({delay})", f"write max_delay_ms: {delay} or more"
            )
        return cls(
            count=whole("retry.count", options.get("count", cls.count), 0, 1000),
            backoff=backoff,
            delay_ms=delay,
            max_delay_ms=max_delay,
            retry_after_max_ms=whole(
                "retry.retry_after_max_ms", options.get("retry_after_max_ms", cls.retry_after_max_ms), 0, 86_400_000
            ),
            timeout_ms=whole("retry.timeout_ms", options.get("timeout_ms", cls.timeout_ms), 1, 3_600_000),
            retry_on=_status_codes(options.get("retry_on", DEFAULT_RETRY_ON)),
        )

    def retryable(self, status: int | None) -> bool:
        """Whether a failed attempt may be retried: transport errors always, statuses if listed."""
        return status is None or status in self.retry_on

    def backoff_ms(self, retry: int) -> int:
        """The back-off before retry number ``retry`` (1-based): the formula's value capped by
        ``max_delay_ms``, plus up to a fifth of it (:mod:`jetkafka._backoff`)."""
        return _backoff_ms(retry, self.delay_ms, self.max_delay_ms, self.backoff)

    def wait_ms(self, retry: int, status: int | None, retry_after: str | None, now: float | None = None) -> int:
        """The wait before retry ``retry``: the back-off, or a longer Retry-After (capped)."""
        wait = self.backoff_ms(retry)
        if status in (429, 503) and retry_after and self.retry_after_max_ms > 0:
            asked = parse_retry_after(retry_after, now)
            if asked is not None:
                wait = max(wait, min(asked, self.retry_after_max_ms))
        return wait


def parse_retry_after(value: str, now: float | None = None) -> int | None:
    """Milliseconds asked for by a Retry-After value (delay-seconds or HTTP-date); None if invalid."""
    text = value.strip()
    if text.isdigit():
        return int(text) * 1000
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0, int((when.timestamp() - current) * 1000))


@dataclass(frozen=True)
class Attempt:
    """One POST: the status (None for a transport error), and what failure handling needs."""

    status: int | None
    body: bytes = b""  # the first BODY_KEPT bytes of the response
    retry_after: str | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else (self.error or "no response")


class HttpSender:
    """POSTs with pooled keep-alive connections, one ``requests.Session`` per calling thread."""

    def __init__(self, timeout_ms: int, pool_size: int = 4) -> None:
        self.timeout_s = timeout_ms / 1000
        self._pool_size = pool_size
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            adapter = HTTPAdapter(pool_connections=self._pool_size, pool_maxsize=self._pool_size, max_retries=0)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Attempt:
        started = time.monotonic()
        try:
            # No redirects: requests would turn a redirected POST into a GET and drop the event.
            response = self._session().post(
                url, data=body, headers=dict(headers), timeout=(self.timeout_s, self.timeout_s), allow_redirects=False
            )
        except requests.RequestException as exc:
            return Attempt(None, error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started)
        content = response.content  # read fully, so the connection goes back to the pool
        return Attempt(
            response.status_code,
            body=content[:BODY_KEPT],
            retry_after=response.headers.get("Retry-After"),
            seconds=time.monotonic() - started,
        )

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        # Threads that post again after a close get a fresh session.
        self._local = threading.local()
