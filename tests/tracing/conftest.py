"""The ``spans`` fixture (tests/support/spans.py) for every test of this directory."""

from tests.support.spans import SKIP_REASON, spans

__all__ = ["SKIP_REASON", "spans"]
