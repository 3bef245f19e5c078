"""What a soak run's members run, per processing mode: the YAML each ``jetkafka run`` gets.

=========================  ====================================================================
mode                       processor
=========================  ====================================================================
``batch``                  :class:`tests.soak.recorder.SoakRecorder`: ``advance()`` per batch
``simple-every-batch``     :class:`tests.soak.recorder.SimpleRecorder`, ``auto_advance:
``simple-periodic``        every-batch``, ``periodic`` (``interval_ms``; ``channel.idle_ms`` set
``simple-no-duplication``  so the idle commit comes within the run) or ``no-duplication``
``dispatcher``             ``jetkafka.processors.cloudevents:HttpDispatcher`` posting to the
                           run's :class:`~tests.soak.subscriber.RecordingSubscriber`
``recovery``               ``SoakRecorder`` with ``recovery.max_partition_lag`` set low, so a
                           take-over after a crash or an expiry records recovery ranges; the
                           recovery processor is a second ``SoakRecorder`` (the channel builds
                           it from the same ``processor`` section), logging its events as
                           recovery deliveries
``key``, ``none``          ``SoakRecorder`` as ``batch``, with ``channel.ordering`` set so
                           (``max_in_flight_per_partition`` from the settings); a slow key
                           (``slow_key_record_s``) makes each record of one key of the slow
                           partition take that long, instead of its whole batches
``spark``                  ``jetkafka.spark:SparkMicroBatchProcessor``, ``fn`` writing each
                           event's id to a ``ParquetSink`` (exactly-once output)
=========================  ====================================================================

Every mode fails on purpose now and then (``raise_rate``): the recorders raise on the first
attempt of a seeded share of batches, the Spark ``fn`` on the first run of a seeded share of
micro-batches, and the dispatcher's subscriber answers 503 to the first attempt of a seeded
share of records. ``SoakRecorder`` (``batch``, ``recovery``) also follows the run's conditions
(:mod:`tests.soak.conditions`): a poisoned partition's poison fails on every attempt, a slow
partition's batches take their time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.soak.guarantee import MODES


@dataclass(frozen=True)
class ModeSettings:
    """The knobs of the processors and the channel that a mode's guarantee depends on."""

    threads: int = 4
    batch_max_events: int = 200
    # Each partition's share of the buffer budget: the rows of a partition held back set it
    # small, so that its backlog fills its owner's budget within a short run.
    buffer_max_events: int = 1000
    shutdown_timeout_s: float = 60.0
    # ``SoakRecorder`` commits the first half of every Nth batch of a partition itself, through
    # ChannelContext.commit, beside the channel's pipelined advances (0: never).
    own_commit_every: int = 0
    commit_interval_ms: int = 100
    periodic_interval_ms: int = 3000
    recovery_max_lag: int = 50
    recovery_batch_max_events: int = 20
    recovery_max_rate: int = 40
    dispatcher_batch_max_events: int = 20
    # The offset mirror to Kafka's group offsets, for lag tools: on in every run, so that it
    # meets every fault; the harness watches the copy (tests.soak.mirror_watch) and the
    # checker judges it (tests.soak.mirror).
    commit_to_kafka: bool = True
    # ``ordering: key | none``: the partition's window of open records, the record keys the
    # producer draws from (``k<id % keys>``; 0: every record its own key), and, under a
    # ``slow`` condition, the time each record of the slow partition's slow key takes
    # (0: the whole batch is slow, as in ``batch``).
    max_in_flight: int = 1000
    keys: int = 0
    slow_key_record_s: float = 0.0

    def guarantee_params(self, mode: str, session_timeout_s: float) -> dict[str, Any]:
        """What :func:`tests.soak.guarantee.guarantee_for` needs, as the members were configured."""
        return {
            "session_timeout_s": session_timeout_s,
            "commit_interval_ms": self.commit_interval_ms,
            "interval_ms": self.periodic_interval_ms,
            "batch_max_events": self.dispatcher_batch_max_events if mode == "dispatcher" else self.batch_max_events,
            "recovery_batch_max_events": self.recovery_batch_max_events,
            # A hot deploy only lowers it: the configured value bounds the batches in hand.
            "threads": self.threads,
            "shutdown_timeout_s": self.shutdown_timeout_s,
            "max_in_flight": self.max_in_flight,
            "keys": self.keys,
        }


def member_config(
    mode: str,
    *,
    seed: int,
    raise_rate: float,
    session_timeout_s: float,
    zk: str,
    kafka: dict[str, Any],
    topic: str,
    group: str,
    run_dir: Path,
    settings: ModeSettings = ModeSettings(),
    subscriber_url: str | None = None,
) -> dict[str, Any]:
    """The configuration every member of a run of ``mode`` starts with (``zk`` chrooted already)."""
    if mode not in MODES:
        raise ValueError(f"unknown soak mode {mode!r}; one of {', '.join(MODES)}")
    events_log = str(run_dir / "events.log")
    config: dict[str, Any] = {
        "zookeeper": {"connect": zk, "session_timeout_s": session_timeout_s},
        "kafka": dict(kafka),
        "channel": {
            "group": group,
            "topics": [topic],
            "threads": settings.threads,
            "batch_max_events": settings.batch_max_events,
            "buffer_max_events": settings.buffer_max_events,
            "rebalance_delay_ms": 100,
            "error_backoff_ms": 200,
            "error_backoff_max_ms": 2000,
            "shutdown_timeout_s": settings.shutdown_timeout_s,
            "commit_interval_ms": settings.commit_interval_ms,
            "commit_to_kafka": settings.commit_to_kafka,
        },
        "logging": {"level": "INFO"},
    }
    recorder = {"path": events_log, "seed": seed, "raise_rate": raise_rate, "delay_ms": 5}
    if mode in ("batch", "recovery", "key", "none"):
        conditions = str(run_dir / "conditions.json")
        options = {**recorder, "conditions": conditions, "own_commit_every": settings.own_commit_every}
        if mode in ("key", "none"):
            config["channel"]["ordering"] = mode
            config["channel"]["max_in_flight_per_partition"] = settings.max_in_flight
            if settings.slow_key_record_s:
                options["slow_key_record_s"] = settings.slow_key_record_s
        config["processor"] = {"class": "tests.soak.recorder:SoakRecorder", "options": options}
        if mode == "recovery":
            config["recovery"] = {
                "max_partition_lag": settings.recovery_max_lag,
                "max_rate": settings.recovery_max_rate,
                "batch_max_events": settings.recovery_batch_max_events,
            }
    elif mode.startswith("simple-"):
        advance = mode.removeprefix("simple-")
        options = {**recorder, "auto_advance": advance}
        if advance == "periodic":
            options["interval_ms"] = settings.periodic_interval_ms
            # The idle commit: when traffic stops, what was processed is committed after this.
            config["channel"]["idle_ms"] = 1000
        config["processor"] = {"class": "tests.soak.recorder:SimpleRecorder", "options": options}
    elif mode == "dispatcher":
        if subscriber_url is None:
            raise ValueError("a dispatcher run needs its subscriber's URL")
        config["channel"]["batch_max_events"] = settings.dispatcher_batch_max_events
        config["processor"] = {
            "class": "jetkafka.processors.cloudevents:HttpDispatcher",
            "options": {
                "url": subscriber_url,
                # Refused first attempts come back quickly and are never given up on.
                "retry": {"count": 20, "backoff": "linear", "delay_ms": 100, "max_delay_ms": 1000, "timeout_ms": 5000},
            },
        }
    else:  # spark
        from tests.spark.helpers import spark_section

        config["processor"] = {
            "class": "jetkafka.spark:SparkMicroBatchProcessor",
            "options": {
                "fn": "tests.soak.recorder:slice_writer",
                "fn_options": {
                    "path": str(run_dir / "output"), "log": events_log, "seed": seed,
                    "raise_rate": raise_rate * 4,  # micro-batches are far fewer than batches
                },
                "value_format": "text",
                "max_events": 20_000,
                "max_interval_ms": 2000,
            },
        }
        config["spark"] = {**spark_section("local[1]"), "driver_memory": "768m"}
    return config


def neighbour_config(name: str, *, kafka: dict[str, Any], topic: str, run_dir: Path) -> dict[str, Any]:
    """A neighbour subscription of a member's folder (the matrix's row of subscriptions): a
    channel of a group of its own (``soak-<name>``) on the run's topic, whose processor only
    counts what it gets (:class:`tests.soak.recorder.NeighbourCounter`, into ``neighbours.log``).
    The sections the process's channels share come from the folder's ``process.yaml``."""
    return {
        "kafka": dict(kafka),
        "channel": {
            "group": f"soak-{name}",
            "topics": [topic],
            "threads": 1,
            "batch_max_events": 500,
            "rebalance_delay_ms": 100,
            "commit_interval_ms": 500,
        },
        "processor": {
            "class": "tests.soak.recorder:NeighbourCounter",
            "options": {"path": str(run_dir / "neighbours.log"), "group": f"soak-{name}"},
        },
    }
