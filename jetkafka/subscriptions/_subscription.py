"""One channel file's channel, moved towards the file's latest valid configuration.

A :class:`Subscription` is told what its file wants (:meth:`Subscription.want`: a
configuration, or None once the file is gone) and gets there on a thread of its own
(``jetkafka-subscription``): it starts the channel, hot-deploys each new configuration to it
(:meth:`~jetkafka.channel._inbound.InboundChannel.reconfigure`: in place, or a graceful
resubscribe), or shuts it down gracefully (batches finished, offsets committed, partitions
handed over at once). Wants that come while it works are merged: it goes to the latest.

Guarantees: a subscription's actions never overlap and never wait for another subscription's
(a slow shutdown or a start that waits for its broker holds back only its own file); what a
channel guarantees through a hot deploy or a shutdown it guarantees here. Failure modes: a
start that fails (an unreachable broker, a missing topic, a processor whose ``on_start``
raises) leaves the subscription ``failed`` with the error as its reason, retried after
:data:`RETRY_S` or at the file's next change; a rejected hot deploy leaves the channel on
its previous configuration (the channel logs why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jetkafka.channel._inbound import InboundChannel
from jetkafka.config import JetkafkaConfig
from jetkafka.errors import JetkafkaError

log = logging.getLogger("jetkafka.subscriptions")

RETRY_S = 30.0

# States, as status pages and /readyz show them.
STARTING, RUNNING, STOPPING, STOPPED, FAILED, INVALID = "starting", "running", "stopping", "stopped", "failed", "invalid"


@dataclass(frozen=True)
class SubscriptionStatus:
    """A subscription as ``/status.json`` and ``/readyz`` show it (ready is judged apart)."""

    file: str
    group: str | None
    state: str
    reason: str
    since: float

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "group": self.group, "state": self.state, "reason": self.reason, "since": self.since}


class Subscription:
    """The channel of one file; ``build`` makes a channel for a configuration (not started).

    Threads: every method may be called from any thread; the work runs on the subscription's
    own thread, one action at a time.
    """

    def __init__(
        self,
        path: str,
        build: Callable[[JetkafkaConfig], InboundChannel],
        starts: threading.Semaphore,
        stopped: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self._build = build
        self._stopped = stopped  # told when its channel has stopped
        self._starts = starts  # bounds the starts in progress across the process's subscriptions
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wanted: JetkafkaConfig | None = None
        self._applied: JetkafkaConfig | None = None
        self._thread: threading.Thread | None = None
        self.channel: InboundChannel | None = None
        self._state = STOPPED
        self._reason = "not started yet"
        self._since = time.time()
        self._group: str | None = None
        self.retry_at: float | None = None
        self._stop_why = "file removed"
        # What the channel's last stop returned: True when it let go of every partition in
        # time; None when it had no channel to stop.
        self.stopped_clean: bool | None = None

    @property
    def name(self) -> str:
        return Path(self.path).name

    # -- what the file wants ---------------------------------------------------------------

    def want(self, config: JetkafkaConfig | None, why: str = "file removed") -> None:
        """Move to ``config`` (None: stop, ``why`` saying what for); returns at once.

        The same configuration again (the folder read again, a file saved unchanged) changes
        nothing: a rejected hot deploy is not tried again, a failed start waits for its retry.
        """
        with self._lock:
            if config == self._wanted and (config is not None or self._applied is None):
                return
            self._wanted = config
            self._stop_why = why
            if config is not None:
                self._group = config.channel.group
            self.retry_at = None
            self._wake()

    def retry(self) -> None:
        """Start again after a failed start (the periodic tick calls it once ``retry_at`` passed)."""
        with self._lock:
            if self._state != FAILED:
                return
            self._applied = None
            self.retry_at = None
            self._wake()

    def refuse(self, reason: str) -> None:
        """The file is invalid: a running channel goes on as it is; otherwise say why it does not run."""
        with self._lock:
            if self.channel is None and self._thread is None:
                self._set_locked(INVALID, reason)

    def _wake(self) -> None:
        # Under the lock.
        if self._thread is None:
            self._thread = threading.Thread(target=self._converge, name="jetkafka-subscription", daemon=True)
            self._thread.start()
        self._changed.notify_all()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until nothing is left to do; True when settled in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._thread is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
            return True

    # -- the subscription's thread ---------------------------------------------------------

    def _converge(self) -> None:
        while True:
            with self._lock:
                wanted = self._wanted
                if wanted is self._applied:
                    self._thread = None
                    self._changed.notify_all()
                    return
            try:
                self._apply(wanted)
            except Exception:
                log.exception("%s: applying the file failed", self.path)
                with self._lock:
                    self._applied = wanted

    def _apply(self, wanted: JetkafkaConfig | None) -> None:
        channel = self.channel
        if wanted is None:
            why = self._stop_why
            if channel is not None:
                self._set(STOPPING, f"{why}: finishing batches, committing, handing partitions over")
                log.info("%s: %s, stopping the channel of group %s", self.path, why, channel.config.channel.group)
                clean = channel.shutdown()
                self.channel = None
                self.stopped_clean = clean
                log.info("%s: channel stopped%s", self.path, "" if clean else " (shutdown_timeout_s passed first)")
            self._set(STOPPED, why)
            self._done(None)
            if self._stopped is not None and channel is not None:
                self._stopped()
            return
        if channel is None:
            self._start(wanted)
            return
        change = channel.reconfigure(wanted)
        if change.kind == "rejected":
            self._set(RUNNING, f"running on its previous configuration: the change of {', '.join(change.keys)} was rejected (see the log)")
        elif change.kind != "none":
            self._set(RUNNING, f"hot deployed ({change})")
        self._done(wanted)

    def _start(self, config: JetkafkaConfig) -> None:
        self._set(STARTING, "starting")
        try:
            with self._starts:
                channel = self._build(config)
                channel.start()
        except Exception as exc:
            reason = str(exc) if isinstance(exc, JetkafkaError) else f"{type(exc).__name__}: {exc}"
            log.error(
                "%s: the channel of group %s did not start, retrying in %.0f s or at the file's next change: %s",
                self.path,
                config.channel.group,
                RETRY_S,
                reason,
                exc_info=not isinstance(exc, JetkafkaError),
            )
            with self._lock:
                self.retry_at = time.monotonic() + RETRY_S
                self._set_locked(FAILED, f"did not start: {reason}")
                self._applied = config
            return
        self.channel = channel
        self._set(RUNNING, "started")
        log.info("%s: channel of group %s running", self.path, config.channel.group)
        self._done(config)

    def _done(self, applied: JetkafkaConfig | None) -> None:
        with self._lock:
            self._applied = applied

    # -- status ----------------------------------------------------------------------------

    def _set(self, state: str, reason: str) -> None:
        with self._lock:
            self._set_locked(state, reason)

    def _set_locked(self, state: str, reason: str) -> None:
        if state != self._state:
            self._since = time.time()
        self._state, self._reason = state, reason

    @property
    def state(self) -> str:
        return self._state

    def status(self) -> SubscriptionStatus:
        with self._lock:
            return SubscriptionStatus(self.path, self._group, self._state, self._reason, self._since)

    @property
    def settled_stopped(self) -> bool:
        with self._lock:
            return self._thread is None and self.channel is None and self._wanted is None


__all__ = ["FAILED", "INVALID", "RUNNING", "STARTING", "STOPPED", "STOPPING", "Subscription", "SubscriptionStatus"]
