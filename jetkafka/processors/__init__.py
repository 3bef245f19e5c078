"""Processors: the base class, the response type, and ready-made processors."""

from jetkafka.processors._async import AsyncBatchEventProcessor
from jetkafka.processors._base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors._simple import SimpleKafkaProcessor

__all__ = ["AsyncBatchEventProcessor", "BatchEventProcessor", "BatchResponse", "ResponseKind", "SimpleKafkaProcessor"]
