"""Public names renamed after 0.1.0 stay importable for one release, and say so when used."""

from __future__ import annotations

import importlib

import pytest

import jetkafka
import jetkafka.coordination
from jetkafka.coordination._process_session import ProcessSession


@pytest.mark.parametrize("module", ["jetkafka", "jetkafka.coordination"])
def test_kafka_controller_is_process_session_with_a_deprecation_warning(module: str) -> None:
    with pytest.warns(DeprecationWarning, match=r"KafkaController is deprecated: use .*ProcessSession"):
        old = importlib.import_module(module).KafkaController
    assert old is ProcessSession


def test_from_import_of_the_old_name_warns_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="KafkaController is deprecated") as caught:
        from jetkafka import KafkaController  # noqa: F401
    assert caught[0].filename == __file__


@pytest.mark.parametrize("module", [jetkafka, jetkafka.coordination])
def test_the_new_name_is_public_and_the_old_one_is_not_listed(module: object) -> None:
    assert "ProcessSession" in module.__all__  # type: ignore[attr-defined]
    assert "KafkaController" not in module.__all__  # type: ignore[attr-defined]


@pytest.mark.parametrize("module", [jetkafka, jetkafka.coordination])
def test_other_missing_names_still_raise_attribute_error(module: object) -> None:
    with pytest.raises(AttributeError, match="no attribute 'GroupControl'"):
        module.GroupControl  # type: ignore[attr-defined]  # noqa: B018
