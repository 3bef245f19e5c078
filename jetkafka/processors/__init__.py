"""Processors: the base class, the response type, and ready-made processors."""

from jetkafka.processors.base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors.simple import SimpleKafkaProcessor

__all__ = ["BatchEventProcessor", "BatchResponse", "ResponseKind", "SimpleKafkaProcessor"]
