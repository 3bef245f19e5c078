"""The ``/debug/`` paths of the metrics endpoint: a thread dump, a profile, the memory report.

- ``GET /debug/threads``: :func:`~jetkafka.profiling._threads.thread_dump`, text.
- ``GET /debug/profile?seconds=N[&hz=H][&format=speedscope|collapsed][&mode=cpu|wall]``: a
  sampling profile of every thread over N seconds (:mod:`jetkafka.profiling._sampler`), answered
  when it is done: speedscope JSON (the default) or collapsed stacks as text.
- ``GET /debug/memory[?limit=N&group=lineno|filename|traceback]``: what tracemalloc knows
  (:mod:`jetkafka.profiling._memory`), text.

Guarantee: the paths answer only while ``enabled()`` says so; it is asked at every request
(the endpoint asks whether an attached channel has ``metrics.debug: true``), so a hot deploy
that turns the key on or off applies to the next request. Otherwise they answer 404 with a JSON
body naming the key. One profile runs at a time: a second request while one runs answers 409
with the time the running one ends. A bad parameter answers 400 with a JSON body naming the
parameter and its bounds; nothing is sampled.

Cost: nothing while no request comes (no thread, no hook). A profile request holds one HTTP
thread for its seconds; :meth:`DebugRoutes.close` (the endpoint's close) ends a running profile
early, so a channel that shuts down is not held by it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from jetkafka.ops._http import JSON_TYPE, Answer, QueryRoute, json_answer
from jetkafka.profiling._formats import collapsed, describe, speedscope_bytes
from jetkafka.profiling._memory import DEFAULT_LIMIT, memory_report
from jetkafka.profiling._memory import check_request as check_memory_request
from jetkafka.profiling._sampler import DEFAULT_HZ, sample
from jetkafka.profiling._sampler import check_request as check_profile_request
from jetkafka.profiling._threads import thread_dump

__all__ = ["DEBUG_OFF", "FORMATS", "DebugRoutes"]

log = logging.getLogger("jetkafka.profiling")

TEXT_TYPE = "text/plain; charset=utf-8"
FORMATS = ("speedscope", "collapsed")
DEBUG_OFF = (
    "the /debug/ paths are off: set metrics.debug: true in the configuration of a channel served "
    "on this endpoint, or in a folder's process.yaml (a hot deploy applies it in place)"
)


class _BadRequest(ValueError):
    pass


def _number(query: Mapping[str, str], name: str, default: float | None) -> float:
    text = query.get(name)
    if text is None or text == "":
        if default is None:
            raise _BadRequest(f"give {name}=N, e.g. /debug/profile?{name}=10")
        return default
    try:
        value = float(text)
    except ValueError:
        raise _BadRequest(f"{name}={text!r} is not a number") from None
    if value != value:  # NaN
        raise _BadRequest(f"{name}={text!r} is not a number")
    return value


def _checked(check: Callable[..., None], *args: object) -> None:
    """Run a module's ``check_request``: its :class:`ValueError` is the client's error, a 400."""
    try:
        check(*args)
    except ValueError as bad:
        raise _BadRequest(str(bad)) from None


def _choice(query: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = query.get(name) or default
    if value not in choices:
        raise _BadRequest(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


class DebugRoutes:
    """The three paths, answering only while ``enabled()`` is true."""

    def __init__(self, enabled: Callable[[], bool]) -> None:
        self._enabled = enabled
        self._profiling = threading.Lock()
        self._ends_at = 0.0  # time.time() when the running profile ends
        self._cancel = threading.Event()

    def routes(self) -> dict[str, QueryRoute]:
        return {"/debug/threads": self.threads, "/debug/profile": self.profile, "/debug/memory": self.memory}

    def _guard(self, answer: Callable[[], Answer]) -> Answer:
        if not self._enabled():
            return json_answer(404, {"error": DEBUG_OFF})
        try:
            return answer()
        except _BadRequest as bad:
            return json_answer(400, {"error": str(bad)})

    def threads(self, query: Mapping[str, str]) -> Answer:
        return self._guard(lambda: (200, TEXT_TYPE, thread_dump().encode()))

    def memory(self, query: Mapping[str, str]) -> Answer:
        def answer() -> Answer:
            limit = _number(query, "limit", DEFAULT_LIMIT)
            if limit != int(limit):
                raise _BadRequest(f"limit={query['limit']!r} is not a whole number")
            group = query.get("group") or "lineno"
            _checked(check_memory_request, int(limit), group)
            return 200, TEXT_TYPE, memory_report(int(limit), group).encode()

        return self._guard(answer)

    def profile(self, query: Mapping[str, str]) -> Answer:
        def answer() -> Answer:
            seconds = _number(query, "seconds", None)
            hz = _number(query, "hz", DEFAULT_HZ)
            mode = _choice(query, "mode", ("cpu", "wall"), "cpu")
            form = _choice(query, "format", FORMATS, "speedscope")
            _checked(check_profile_request, seconds, hz, mode)
            if not self._profiling.acquire(blocking=False):
                ends = self._ends_at
                return json_answer(
                    409,
                    {
                        "error": "a profile is already running: one at a time; try again when it ends, "
                        f"at {time.strftime('%Y-%m-%dT%H:%M:%S%z', time.localtime(ends))} "
                        f"(in {max(0.0, ends - time.time()):.1f} s)",
                        "ends_at": ends,
                    },
                )
            try:
                self._ends_at = time.time() + seconds
                log.info("profiling every thread for %g s at %g Hz (%s mode)", seconds, hz, mode)
                profile = sample(seconds, hz, mode, self._cancel)
            finally:
                self._profiling.release()
            log.info("%s; the sampler used %.3f s of CPU", describe(profile), profile.sampler_cpu_seconds)
            if form == "collapsed":
                return 200, TEXT_TYPE, collapsed(profile).encode()
            return 200, JSON_TYPE, speedscope_bytes(profile)

        return self._guard(answer)

    def close(self) -> None:
        """End a running profile now (its request answers with what was sampled)."""
        self._cancel.set()
