"""The fix a configuration error suggests: for ${VAR} in a flow list, and for a whole section."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetkafka.config import load_config
from jetkafka.errors import ConfigError

HEAD = "zookeeper: {connect: 'h:1'}\nkafka: {bootstrap.servers: 'x:1'}\n"


def error_of(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"TOPIC": "orders"})
    return caught.value


@pytest.mark.parametrize(
    ("line", "key", "reference"),
    [
        ("channel:\n  group: g\n  topics: [${TOPIC}]\n", "topics", "${TOPIC}"),
        ("channel: {group: g, topics: [a, ${TOPIC:-b}]}\n", "topics", "${TOPIC:-b}"),
    ],
)
def test_an_unquoted_reference_in_a_flow_list_is_told_to_be_quoted(
    tmp_path: Path, line: str, key: str, reference: str
) -> None:
    error = error_of(tmp_path, HEAD + line)
    assert f'{key}: ["{reference}"]' in error.fix and f"- {reference}" in error.fix
    assert "close the list" not in error.fix
    # Quoted as the fix says, the file loads.
    path = tmp_path / "fixed.yaml"
    path.write_text(HEAD + line.replace(reference, f'"{reference}"'))
    assert "orders" in load_config(path, env={"TOPIC": "orders"}).channel.topics


def test_an_unclosed_list_still_gets_the_bracket_hint(tmp_path: Path) -> None:
    error = error_of(tmp_path, HEAD + "channel: {group: g, topics: [a b}\n")
    assert "']'" in error.fix or "bracket" in error.fix


@pytest.mark.parametrize("section", ["logging", "metrics", "spark", "recovery", "channel.on_error"])
def test_a_section_that_is_not_a_mapping_gets_a_non_empty_example(tmp_path: Path, section: str) -> None:
    if section == "channel.on_error":
        text = HEAD + "channel: {group: g, topics: [t], on_error: 3}\n"
    else:
        text = HEAD + f"channel: {{group: g, topics: [t]}}\n{section}: 3\n"
    error = error_of(tmp_path, text)
    leaf = section.rsplit(".", 1)[-1]
    example = error.fix.split("e.g.\n", 1)[1].splitlines()
    assert example[0].strip() == f"{leaf}:"
    assert len(example) >= 2 and ": " in example[1], error.fix
