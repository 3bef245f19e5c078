"""Liveness and readiness of the channels a process serves metrics for: ``/healthz`` and ``/readyz``.

Each check returns a :class:`Verdict`: ``ok`` (HTTP 200, else 503) and a JSON-ready body whose
``reason`` says why, with one entry per channel under ``channels``.

Live (:func:`liveness`): every attached channel's loops run. The loops are the threads a
channel starts: its fetcher (``jetkafka-fetcher``), its ``channel.threads`` workers
(``jetkafka-worker-N``) and the process's rebalance thread (``jetkafka-rebalance``, shared by
the channels of one ZooKeeper ensemble). A channel does not hand its threads to add-ons, so
they are counted by name among the process's live threads: live when the process runs at
least one fetcher per attached channel, at least as many workers as they ask for together,
and a rebalance thread. A loop that died (an uncaught error ends its thread) makes the count
fall short and the process not live, which is what a liveness probe restarts it for.

Ready (:func:`readiness`): for every attached channel, its ZooKeeper session is connected, its
consumer fetches (its fetching thread runs, and librdkafka has not reported every broker down
since the last message, or a metadata look-up says a broker answers again), and
either the channel is paused (``jetkafka pause`` or ``pause()``: deliberately idle, still
ready) or it holds its share. *Holds its share* is judged from a fresh read of the group in
ZooKeeper (live members, owners) and the partition counts from the brokers, with the same
plan the rebalance thread follows (:func:`~jetkafka.coordination._assignment.plan_topic`):
for every topic of the channel the plan for this member asks it to release nothing and to
take no free partition, and (dynamic and static coordinators) it holds as many partitions as
its quota. A fixed-count member that finds no free partition holds what it can and is ready.
A member that has not started its first rebalance, or whose registration is missing, is not
ready. While another member still holds a partition due to this one, this one is not ready:
the group is still moving.

A held partition that does not move on (its batch keeps failing under ``channel.on_error``,
or it is halted by ``on_out_of_range: fail``) changes neither verdict: it is listed under the
channel's ``failing`` and named in the ``reason``, and the channel stays live and ready. A
restart would not help (the record fails the same way after it) and would hand the partition,
poison and all, to another instance; not ready would stall every rolling update (the new pod
that takes the partition never becomes ready) and a node's drain. Such a partition is for the
``jetkafka_partition_failing_seconds`` gauge and its alert, ``jetkafka status`` and the status
page, not for the probes.

Threads: called on the HTTP server's request threads; every read goes to the channel through
:class:`~jetkafka.channel._running.RunningChannel` or to ZooKeeper and the brokers, never to
the channel's internals. Failure modes: a ZooKeeper or broker read that fails makes the
channel not ready, with the error as its reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel

FETCHER_THREAD = "jetkafka-fetcher"
WORKER_THREAD_PREFIX = "jetkafka-worker-"
REBALANCE_THREAD = "jetkafka-rebalance"

# Partition counts change rarely (a topic grows); a probe every few seconds need not ask the
# brokers each time.
PARTITION_COUNTS_TTL_S = 30.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


def _thread_names() -> list[str]:
    return [t.name for t in threading.enumerate() if t.is_alive()]


def liveness(channels: Sequence[RunningChannel], thread_names: Callable[[], list[str]] = _thread_names) -> Verdict:
    """Whether the process's loops run for every attached channel (see the module docstring)."""
    if not channels:
        return Verdict(False, {"status": "not live", "reason": "no channel is attached to this endpoint"})
    names = thread_names()
    fetchers = sum(1 for n in names if n == FETCHER_THREAD)
    workers = sum(1 for n in names if n.startswith(WORKER_THREAD_PREFIX))
    rebalancers = sum(1 for n in names if n == REBALANCE_THREAD)
    wanted_workers = sum(c.config.channel.threads for c in channels)
    loops = {
        "fetcher": {"running": fetchers, "wanted": len(channels)},
        "workers": {"running": workers, "wanted": wanted_workers},
        "rebalance": {"running": rebalancers, "wanted": 1},
    }
    missing = [name for name, n in loops.items() if n["running"] < n["wanted"]]
    body: dict[str, Any] = {"channels": [_channel_id(c) for c in channels], "loops": loops}
    if missing:
        return Verdict(False, {**body, "status": "not live", "reason": f"loops not running: {', '.join(missing)}"})
    return Verdict(True, {**body, "status": "live", "reason": "all loops are running"})


def _channel_id(channel: RunningChannel) -> dict[str, str]:
    return {"group": channel.config.channel.group, "consumer": channel.consumer_id}


class PartitionCounts:
    """Partition counts per topic from the brokers, looked up at most every ``ttl`` seconds.

    ``lookup`` is called with the topics and answers ``{topic: count}``; thread-safe.
    """

    def __init__(self, lookup: Callable[[Sequence[str]], Mapping[str, int]], ttl: float = PARTITION_COUNTS_TTL_S) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, int]] = {}

    def get(self, topics: Sequence[str]) -> dict[str, int]:
        now = time.monotonic()
        with self._lock:
            stale = [t for t in topics if t not in self._cached or now - self._cached[t][0] > self._ttl]
            if stale:
                for topic, count in self._lookup(stale).items():
                    self._cached[topic] = (now, count)
            return {t: self._cached[t][1] for t in topics}


def channel_readiness(channel: RunningChannel, counts: PartitionCounts) -> tuple[bool, dict[str, Any]]:
    """One channel's readiness and its reason (see the module docstring)."""
    from jetkafka.coordination._assignment import plan_topic
    from jetkafka.coordination._ownership import PartitionOwnership
    from jetkafka.coordination._registry import ConsumerRegistry

    entry: dict[str, Any] = _channel_id(channel)
    state = channel.zookeeper_state()
    entry["zookeeper"] = state
    if state != "CONNECTED":
        return False, {**entry, "ready": False, "reason": f"ZooKeeper session {state}"}
    if channel.paused:
        return True, {**entry, "ready": True, "paused": True, "reason": "paused"}
    not_fetching = channel.fetching()
    if not_fetching is not None:
        try:
            # librdkafka says when every broker is down, never when one is back: a metadata
            # answer on the channel's other consumer tells an outage that is over.
            channel.partition_counts(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - any failure means "not known to fetch", said in the reason
            return False, {**entry, "ready": False, "reason": f"its consumer does not fetch: {not_fetching} ({exc})"}
    if sum(channel.stats.rebalance_counts().values()) == 0:
        return False, {**entry, "ready": False, "reason": "first rebalance not done yet"}
    try:
        client, paths, cid = channel.zookeeper, channel.paths, channel.consumer_id
        live = ConsumerRegistry(client, paths).live()
        me = live.get(cid)
        if me is None:
            return False, {**entry, "ready": False, "reason": "not registered in the group"}
        topics = list(channel.config.channel.topics)
        partition_counts = counts.get(topics)
        ownership = PartitionOwnership(client, paths, "")
        shares: dict[str, dict[str, Any]] = {}
        unsettled: list[str] = []
        for topic in topics:
            owners = ownership.owners(topic)
            plan, _claims = plan_topic(me, topic, partition_counts[topic], live, owners)
            held = sorted(p for p, owner in owners.items() if owner == cid)
            settled = not plan.release and not plan.take
            if me.coordinator != "fixed-count":
                settled = settled and len(held) >= plan.quota
            shares[topic] = {"held": held, "quota": plan.quota, "release": list(plan.release), "take": list(plan.take)}
            if not settled:
                unsettled.append(f"{topic}: holds {len(held)} of {plan.quota}")
    except Exception as exc:  # noqa: BLE001 - any failed read means "not known to be ready", said in the reason
        return False, {**entry, "ready": False, "reason": f"cannot read the group: {exc}"}
    entry["topics"] = shares
    failing = not_moving_on(channel)
    entry["failing"] = failing
    if unsettled:
        reason = "does not hold its share yet (" + "; ".join(unsettled) + ")"
        return False, {**entry, "ready": False, "reason": reason + describe_failing(failing)}
    return True, {**entry, "ready": True, "paused": False, "reason": "holds its share" + describe_failing(failing)}


# Partitions named in a reason; the list under "failing" has them all.
NAMED_IN_REASON = 3


def not_moving_on(channel: RunningChannel) -> list[dict[str, Any]]:
    """The channel's held partitions that do not move on, longest first (``failing`` of /readyz)."""
    failing = sorted(
        ((p.topic, p.partition, p.failure) for p in channel.partitions() if p.failure is not None),
        key=lambda tpf: tpf[2].since,
    )
    return [
        {
            "topic": topic,
            "partition": partition,
            "state": f.state,
            "since": f.since,
            "attempts": f.attempts,
            "error": f.error,
            "next_attempt": f.next_attempt,
        }
        for topic, partition, f in failing
    ]


def describe_failing(failing: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    """``"; 1 partition not moving on: t[0] retrying for 42 s (ValueError: ...)"``, or nothing."""
    if not failing:
        return ""
    now = time.time() if now is None else now
    named = [
        f"{f['topic']}[{f['partition']}] {f['state']} for {max(0, int(now - f['since']))} s ({f['error']})"
        for f in failing[:NAMED_IN_REASON]
    ]
    more = f", and {len(failing) - NAMED_IN_REASON} more" if len(failing) > NAMED_IN_REASON else ""
    count = f"{len(failing)} partition{'s' if len(failing) > 1 else ''}"
    return f"; {count} not moving on: {', '.join(named)}{more}"


def readiness(
    channels: Sequence[RunningChannel],
    counts: Callable[[RunningChannel], PartitionCounts],
    not_running: Sequence[Mapping[str, Any]] | None = None,
) -> Verdict:
    """Ready when every attached channel is (see the module docstring); ``counts`` gives a
    channel's :class:`PartitionCounts`.

    ``not_running`` (a process running a folder of channel files) lists the subscriptions
    without a channel attached, each with ``file``, ``group``, ``state`` and ``reason``: one
    that should run and does not (starting, failed, stopping) makes the process not ready and
    is named; a file refused as invalid is listed under ``refused`` and changes nothing (its
    error is in the log and on the status page; a typo in a new file must not take a running
    process out of service).
    """
    waiting = [s for s in not_running or () if s["state"] not in ("invalid", "stopped")]
    refused = [dict(s) for s in not_running or () if s["state"] == "invalid"]
    extra: dict[str, Any] = {"refused": refused} if not_running is not None else {}
    if not channels and not waiting:
        return Verdict(
            False, {"status": "not ready", "reason": "no channel is attached to this endpoint", "channels": [], **extra}
        )
    entries = []
    ready = not waiting
    for channel in channels:
        ok, entry = channel_readiness(channel, counts(channel))
        entry["file"] = channel.config.source
        ready = ready and ok
        entries.append(entry)
    for s in waiting:
        entries.append({"file": s["file"], "group": s["group"], "consumer": None, "ready": False, "reason": f"{s['state']}: {s['reason']}"})
    if ready:
        paused = all(e.get("paused") for e in entries)
        if paused:
            reason = "paused"
        elif len(entries) == 1:
            reason = entries[0]["reason"]
        else:
            failing = sum(len(e.get("failing", ())) for e in entries)
            reason = "every channel is ready" + (f"; {failing} partition(s) not moving on (see channels)" if failing else "")
        return Verdict(True, {"status": "ready", "reason": reason, "channels": entries, **extra})
    reasons = [_named(e) + f": {e['reason']}" for e in entries if not e["ready"]]
    return Verdict(False, {"status": "not ready", "reason": "; ".join(reasons), "channels": entries, **extra})


def _named(entry: Mapping[str, Any]) -> str:
    """``group/consumer``, with the channel's file when it came from a folder's file."""
    who = f"{entry['group']}/{entry['consumer']}" if entry.get("consumer") else f"{entry['group']}"
    source = entry.get("file")
    return f"{who} ({source})" if source and source != "<dict>" else who


__all__ = ["PartitionCounts", "Verdict", "channel_readiness", "liveness", "readiness"]
