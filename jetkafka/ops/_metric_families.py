"""What jetkafka exports to Prometheus: every metric family, and every known label value.

:data:`FAMILIES` names each family, its help text and its labels; docs/operations.md's reference
follows it, and config/monitoring/ (alert rules, dashboard) may use only names from it (a test
checks both against a running channel's endpoint).

:data:`KNOWN_LABEL_VALUES` lists, per counter and label, every value the channel can count.
:mod:`jetkafka.ops._metrics` writes each of them at 0 from the first scrape, for each held
partition or each instance, so ``rate()`` and ``increase()`` see the series before its first
event instead of starting from nothing (a new series has no previous sample to compare with,
so its first increment would be invisible to them). A value outside the list is still exported
once it happens; a test reads the channel's sources for the kinds it counts, so the list
cannot fall behind them silently.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from jetkafka.channel._stats import LOSS_REASONS, REFUSAL_CAUSES
from jetkafka.kafka_groups._mirror_failures import KNOWN_FAILURE_REASONS
from jetkafka.ops._micro_batch_reports import PHASES as MICRO_BATCH_PHASES
from jetkafka.processors._base import ResponseKind

ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")
PARTITION_LABELS = ("group", "topic", "partition")
INSTANCE_LABELS = ("group", "consumer")
TOPIC_LABELS = ("group", "topic")

# Errors counted per partition (ChannelStats.error): the processor's batch call raised; a
# callback raised (``<hook>_raised``); a commit refused; the partition lost with work in hand;
# the fetch offset out of range; a failed batch dead-lettered, or dead-lettering it failed; a
# failed batch skipped by the failure policy.
CALLBACKS_COUNTED = ("on_batch_processed", "on_idle", "on_stream_termination", "on_exception", "on_reposition")
ERROR_KINDS = (
    "processor_raised",
    *(f"{hook}_raised" for hook in CALLBACKS_COUNTED),
    "commit_refused",
    "partition_lost",
    "offset_out_of_range",
    "dead_lettered",
    "dead_letter_failed",
    "skipped",
)
# What starts a rebalance run, as coordination._membership.reason_label writes it.
REBALANCE_REASONS = (
    "start",
    "consumers_changed",
    "owners_changed",
    "retake",
    "timer",
    "release_retry",
    "connection_restored",
    "new_session",
)
RECOVERY_LOSS_REASONS = ("retention", "max_records")

# family key -> label -> every value known in advance.
KNOWN_LABEL_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "batches": {"response": tuple(kind.value for kind in ResponseKind)},
    "errors": {"kind": ERROR_KINDS},
    "rebalances": {"reason": REBALANCE_REASONS},
    "refused": {"cause": REFUSAL_CAUSES},
    "lost": {"reason": LOSS_REASONS},
    "recovery_lost": {"reason": RECOVERY_LOSS_REASONS},
    "zookeeper": {"state": ZOOKEEPER_STATES},
    "mb_phase_seconds": {"phase": MICRO_BATCH_PHASES},
    "mb_last_seconds": {"phase": MICRO_BATCH_PHASES},
    "mirror_failures": {"reason": KNOWN_FAILURE_REASONS},
}

_P, _I = PARTITION_LABELS, INSTANCE_LABELS

# key: (family class, name, help, labels). The reference in docs/operations.md follows this table.
FamilyClass = type[CounterMetricFamily] | type[GaugeMetricFamily] | type[HistogramMetricFamily]
FAMILIES: dict[str, tuple[FamilyClass, str, str, tuple[str, ...]]] = {
    "events": (
        CounterMetricFamily,
        "jetkafka_partition_events_consumed",
        "Events of the partition handed to the processor in batches that completed.",
        _P,
    ),
    "batches": (
        CounterMetricFamily,
        "jetkafka_partition_batches",
        "Batches of the partition, by the processor's response (advance, revert, get_next).",
        (*_P, "response"),
    ),
    "errors": (
        CounterMetricFamily,
        "jetkafka_partition_errors",
        "Errors on the partition, by kind (processor_raised, commit_refused, partition_lost, ...).",
        (*_P, "kind"),
    ),
    "duration": (
        HistogramMetricFamily,
        "jetkafka_partition_batch_duration_seconds",
        "Time the processor took for one batch of the partition.",
        _P,
    ),
    "committed": (
        GaugeMetricFamily,
        "jetkafka_partition_committed_offset",
        "Next offset to read, as committed in ZooKeeper.",
        _P,
    ),
    "low": (
        GaugeMetricFamily,
        "jetkafka_partition_low_watermark",
        "Oldest offset the broker still holds (last look-up).",
        _P,
    ),
    "high": (
        GaugeMetricFamily,
        "jetkafka_partition_high_watermark",
        "Offset the next produced record will get (last look-up).",
        _P,
    ),
    "lag": (
        GaugeMetricFamily,
        "jetkafka_partition_lag",
        "Records not yet committed: high watermark minus committed offset, at least 0.",
        _P,
    ),
    "lag_seconds": (
        GaugeMetricFamily,
        "jetkafka_partition_lag_seconds",
        (
            "How far behind in time: now minus the timestamp of the next record to process, 0 when caught up; "
            "an upper bound while behind with nothing fetched (see docs/operations.md)."
        ),
        _P,
    ),
    "buffered": (
        GaugeMetricFamily,
        "jetkafka_partition_buffered_events",
        (
            "Events fetched for the partition and waiting for its processor; at most about its share "
            "(channel.buffer_max_events) while other partitions want room."
        ),
        _P,
    ),
    "given_back": (
        CounterMetricFamily,
        "jetkafka_partition_events_given_back",
        (
            "Fetched events of the partition dropped from its buffer to give other partitions room, to be "
            "fetched again: it held more than its share while it could not drain, or drained slower than they."
        ),
        _P,
    ),
    "failing_seconds": (
        GaugeMetricFamily,
        "jetkafka_partition_failing_seconds",
        (
            "Seconds since the partition stopped moving on: its batch keeps failing (channel.on_error: retried, "
            "or isolated record by record) or it is halted (on_out_of_range: fail); 0 while it moves on."
        ),
        _P,
    ),
    "in_flight": (
        GaugeMetricFamily,
        "jetkafka_partition_in_flight_records",
        "Under channel.ordering key or none: the partition's records handed to the processor and not finished.",
        _P,
    ),
    "open_records": (
        GaugeMetricFamily,
        "jetkafka_partition_open_records",
        (
            "Under channel.ordering key or none: records taken and not yet below the commit point, at most "
            "channel.max_in_flight_per_partition (at that bound the partition takes no more until its oldest finishes)."
        ),
        _P,
    ),
    "finished_above": (
        GaugeMetricFamily,
        "jetkafka_partition_finished_above_commit_records",
        (
            "Under channel.ordering key or none: offsets finished above the commit point, the map committed "
            "with it (a hand-over does not process them again)."
        ),
        _P,
    ),
    "oldest_unfinished": (
        GaugeMetricFamily,
        "jetkafka_partition_oldest_unfinished_seconds",
        (
            "Under channel.ordering key or none: seconds since the record at the commit point (the oldest "
            "unfinished one) was taken; it grows while one key does not move on. 0 with nothing open."
        ),
        _P,
    ),
    "owned": (GaugeMetricFamily, "jetkafka_owned_partitions", "Partitions the channel holds.", _I),
    "paused_partitions": (
        GaugeMetricFamily,
        "jetkafka_paused_partitions",
        "Held partitions that are paused (by pause(), or briefly during an offset reset).",
        _I,
    ),
    "paused": (GaugeMetricFamily, "jetkafka_channel_paused", "1 while the whole channel is paused, else 0.", _I),
    "halted_partitions": (
        GaugeMetricFamily,
        "jetkafka_halted_partitions",
        "Held partitions halted by channel.on_out_of_range: fail; alert on > 0 (reset the offset to continue).",
        _I,
    ),
    "rebalances": (
        CounterMetricFamily,
        "jetkafka_rebalances",
        "Rebalances that took, released or lost one of this instance's partitions, by what triggered the run.",
        (*_I, "reason"),
    ),
    "zookeeper": (
        GaugeMetricFamily,
        "jetkafka_zookeeper_connection_state",
        "1 for the current state of the ZooKeeper session (CONNECTED, SUSPENDED, LOST), 0 for the others.",
        (*_I, "state"),
    ),
    "commits": (CounterMetricFamily, "jetkafka_commits", "Offset commits written to ZooKeeper.", _I),
    "refused": (
        CounterMetricFamily,
        "jetkafka_commits_refused",
        (
            "Offset commits that did not happen because this instance no longer held the partition, by cause: "
            "fenced (another owner), session_expired, not_held (lost here first), dropped (pending when lost)."
        ),
        (*_I, "cause"),
    ),
    "lost": (
        CounterMetricFamily,
        "jetkafka_events_lost",
        (
            "Events this group will not process, by reason: retention (deleted unread), skipped "
            "(on_out_of_range: latest), truncated (processed, then gone from the log)."
        ),
        (*_I, "reason"),
    ),
    "updated": (
        GaugeMetricFamily,
        "jetkafka_watermarks_updated_timestamp_seconds",
        "When the watermarks of every held partition were last looked up successfully.",
        _I,
    ),
    "recovered": (
        CounterMetricFamily,
        "jetkafka_recovered_events",
        "Events of the partition recovered in the background and stored as done.",
        _P,
    ),
    "recovery_remaining": (
        GaugeMetricFamily,
        "jetkafka_recovery_events_remaining",
        "Events of the partition still to recover (offsets in its recovery ranges).",
        _P,
    ),
    "recovery_lost": (
        CounterMetricFamily,
        "jetkafka_recovery_lost_events",
        "Events of the partition that will never be recovered, by reason (retention, max_records).",
        (*_P, "reason"),
    ),
    "recovery_active": (
        GaugeMetricFamily,
        "jetkafka_recovery_active_partitions",
        "Held partitions with events still to recover.",
        _I,
    ),
    "group_partitions": (
        GaugeMetricFamily,
        "jetkafka_group_topic_partitions",
        "Partitions of the topic in Kafka's metadata (last look-up); the same on every instance of the group.",
        TOPIC_LABELS,
    ),
    "group_owned": (
        GaugeMetricFamily,
        "jetkafka_group_owned_partitions",
        "Partitions of the topic with an owner in ZooKeeper, any instance (last look-up); the same on every instance.",
        TOPIC_LABELS,
    ),
    # The offset mirror to Kafka's group offsets (exported by channels with commit_to_kafka).
    "mirror_trail": (
        GaugeMetricFamily,
        "jetkafka_kafka_mirror_trail_seconds",
        (
            "commit_to_kafka: age of the partition's oldest commit landed in ZooKeeper and not yet confirmed in "
            "Kafka's group offsets (kafka.group.id); 0 when Kafka's copy is caught up."
        ),
        _P,
    ),
    "mirror_behind": (
        GaugeMetricFamily,
        "jetkafka_kafka_mirror_behind_offsets",
        (
            "commit_to_kafka: the partition's newest landed commit minus the newest offset Kafka confirmed; 0 when "
            "caught up, negative while a reset that moved it back is not copied yet; absent before Kafka confirmed any."
        ),
        _P,
    ),
    "mirror_commits": (
        CounterMetricFamily,
        "jetkafka_kafka_mirror_commits",
        "commit_to_kafka: OffsetCommit requests sent to mirror landed commits (each carries every partition due).",
        _I,
    ),
    "mirror_failures": (
        CounterMetricFamily,
        "jetkafka_kafka_mirror_failures",
        (
            "commit_to_kafka: mirror commit requests Kafka refused, by reason (the error's name: "
            "GROUP_AUTHORIZATION_FAILED, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION, _TIMED_OUT, ...)."
        ),
        (*_I, "reason"),
    ),
    "build_info": (GaugeMetricFamily, "jetkafka_build_info", "Always 1; the jetkafka version as a label.", ("version",)),
    # The Spark processor's micro-batches (exported by instances running it).
    "mb_batches": (
        CounterMetricFamily,
        "jetkafka_spark_micro_batches",
        "Micro-batches committed by this instance (replays included).",
        _I,
    ),
    "mb_events": (CounterMetricFamily, "jetkafka_spark_micro_batch_events", "Events in committed micro-batches.", _I),
    "mb_failures": (
        CounterMetricFamily,
        "jetkafka_spark_micro_batch_failures",
        "Attempts of the batch function that raised (the micro-batch runs again).",
        _I,
    ),
    "mb_gather_failures": (
        CounterMetricFamily,
        "jetkafka_spark_gather_failures",
        "Batches whose gathering into a micro-batch raised; each is read again from its first offset.",
        _I,
    ),
    "mb_phase_seconds": (
        CounterMetricFamily,
        "jetkafka_spark_micro_batch_phase_seconds",
        "Seconds committed micro-batches spent in each phase: gather, wait, record, build, fn, commit.",
        (*_I, "phase"),
    ),
    "mb_last_seconds": (
        GaugeMetricFamily,
        "jetkafka_spark_last_micro_batch_seconds",
        "Seconds the last committed micro-batch spent in each phase.",
        (*_I, "phase"),
    ),
    "mb_last_events": (
        GaugeMetricFamily,
        "jetkafka_spark_last_micro_batch_events",
        "Events of the last committed micro-batch.",
        _I,
    ),
    "mb_output_files": (
        CounterMetricFamily,
        "jetkafka_spark_output_files",
        "Data files jetkafka's sinks made visible for committed micro-batches.",
        _I,
    ),
    "mb_output_bytes": (
        CounterMetricFamily,
        "jetkafka_spark_output_bytes",
        "Bytes of those files.",
        _I,
    ),
    "mb_held_events": (
        GaugeMetricFamily,
        "jetkafka_spark_held_events",
        "Events the Spark processor holds in memory (the open, ready and running micro-batches).",
        _I,
    ),
}



__all__ = [
    "ERROR_KINDS",
    "FAMILIES",
    "INSTANCE_LABELS",
    "KNOWN_LABEL_VALUES",
    "PARTITION_LABELS",
    "REBALANCE_REASONS",
    "TOPIC_LABELS",
    "ZOOKEEPER_STATES",
]
