"""The CloudEvents dispatcher: a channel's records delivered to an HTTP subscriber, in order.

``jetkafka.processors.cloudevents:HttpDispatcher`` is the processor class to name in YAML. The
package's modules, one idea each: :mod:`.dispatcher` (the processor: per-partition order,
retries, fencing, commits), :mod:`.encoding` (a record as a CloudEvent, binary or structured),
:mod:`.delivery` (the HTTP request and the retry policy), :mod:`.dead_letter` (where a record
goes when it cannot be delivered) and :mod:`.metrics` (its Prometheus series). See
``docs/cloudevents.md``. Needs the ``cloudevents`` extra: ``pip install 'jetkafka[cloudevents]'``;
without it, importing this package raises :class:`~jetkafka.errors.MissingExtra`.
"""

from jetkafka._extras import require_extra

# Before the package's imports, so that without the extra the error names it and its install
# command rather than a third-party module (tests/test_extras.py).
require_extra("cloudevents", __name__)

from jetkafka.processors.cloudevents._dead_letter import DeadLetterFailed, DeliveryFailed  # noqa: E402 - after require_extra on purpose
from jetkafka.processors.cloudevents._delivery import RetryPolicy  # noqa: E402 - after require_extra on purpose
from jetkafka.processors.cloudevents._dispatcher import HttpDispatcher  # noqa: E402 - after require_extra on purpose
from jetkafka.processors.cloudevents._encoding import EncodingError  # noqa: E402 - after require_extra on purpose

__all__ = ["DeadLetterFailed", "DeliveryFailed", "EncodingError", "HttpDispatcher", "RetryPolicy"]
