"""The composition root: a channel and its standard add-ons, built from a configuration.

:mod:`jetkafka.channel` knows nothing of operations or recovery; this module is the one place
that puts them together. The standard add-ons of a channel, in start order:

1. the reset responder (:class:`~jetkafka.ops._responder.ResponderAddOn`), always: every
   instance must apply ``jetkafka offsets reset`` to the partitions it holds;
2. recovery (:class:`~jetkafka.recovery._service.RecoveryAddOn`), active at each start when
   ``recovery.max_partition_lag`` is set;
3. the metrics endpoint (:class:`~jetkafka.ops._metrics_add_on.MetricsAddOn`), active at each
   start when ``metrics.port`` is set;
4. the failure reports (:class:`~jetkafka.ops._failure_reports.FailureReportsAddOn`), always:
   ``jetkafka status`` and the status pages show which partitions of an instance do not move
   on, and why;
5. tracing (:class:`~jetkafka._tracing._add_on.TracingAddOn`), active at each start when
   ``tracing.enabled`` is set. Last is early enough: every add-on starts before the channel
   joins its group, so the tracer provider is in place before the first partition is taken, and
   the spans the others make go to it (jetkafka's tracer finds the provider at each span).

Each decides at each start from the configuration the channel runs on then, so a hot deploy
that turns recovery or metrics on or off takes effect at its resubscribe.

How a channel gets them: ``jetkafka run`` calls :func:`build_channel`. A channel built any other
way without ``add_ons=`` (``InboundChannel(config)``, ``InboundChannel.from_yaml``,
``from_dict``) gets the same ones: importing this module names :func:`standard_add_ons` as the
channel package's default (:func:`jetkafka.channel._add_ons.provide_standard_add_ons`), and the
``jetkafka`` package imports it, so the default is in place before any channel can be built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from jetkafka._tracing._add_on import TracingAddOn
from jetkafka.channel._add_ons import ChannelAddOn, provide_standard_add_ons
from jetkafka.channel._inbound import InboundChannel
from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.ops._failure_reports import FailureReportsAddOn
from jetkafka.ops._metrics_add_on import MetricsAddOn
from jetkafka.ops._responder import ResponderAddOn
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.recovery._service import RecoveryAddOn


def standard_add_ons(recovery_processor: BatchEventProcessor | None = None) -> list[ChannelAddOn]:
    """New instances of the standard add-ons (see the module docstring), for one channel.

    ``recovery_processor`` is the processor recovery batches go to when ``recovery.processor``
    names none (see :func:`jetkafka.recovery._service.choose_processor`).
    """
    return [ResponderAddOn(), RecoveryAddOn(recovery_processor), MetricsAddOn(), FailureReportsAddOn(), TracingAddOn()]


def build_channel(
    config: JetkafkaConfig | str | os.PathLike[str] | Mapping[str, Any],
    processor: BatchEventProcessor | None = None,
    *,
    recovery_processor: BatchEventProcessor | None = None,
    add_ons: Sequence[ChannelAddOn] = (),
    **channel_args: Any,
) -> InboundChannel:
    """A channel on ``config`` (a configuration, the path of a YAML file, or parsed data) with
    the standard add-ons and then ``add_ons``; ``channel_args`` are
    :class:`~jetkafka.channel._inbound.InboundChannel`'s other keyword arguments
    (``controller``, ``pythonpath``, ``consumer_id``, ``wrap_consumer``)."""
    if isinstance(config, Mapping):
        config = parse_config(config)
    elif not isinstance(config, JetkafkaConfig):
        config = load_config(config)
    return InboundChannel(
        config, processor, add_ons=[*standard_add_ons(recovery_processor), *add_ons], **channel_args
    )


provide_standard_add_ons(standard_add_ons)

__all__ = ["build_channel", "standard_add_ons"]
