"""Reading a configuration file: YAML, environment interpolation, validation.

Whatever goes wrong surfaces as one :class:`~jetkafka.errors.ConfigError` naming the file,
the key path and the fix; nothing here lets a Python traceback reach the user.

The loader knows how to read and validate, not what it reads into: the root dataclass is an
argument (:class:`~jetkafka.config._schema.JetkafkaConfig`, whose ``from_yaml`` and
``from_dict`` call :func:`load_as` and :func:`parse_as`), so the schema depends on the loader
and never the other way round.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import yaml

from jetkafka.config._describe import yaml_type
from jetkafka.config._fields import Invalid, is_secret, join_path, line_of
from jetkafka.config._interpolate import interpolate
from jetkafka.config._validate import SectionInvalid, Walker
from jetkafka.errors import ConfigError

_START_HINT = "start from one of the commented examples in the config/ directory (config/orders.yaml)"

Root = TypeVar("Root")


def load_as(
    root: type[Root], path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> Root:
    """Read, interpolate and validate the YAML file at ``path`` into the dataclass ``root``.

    ``env`` replaces ``os.environ`` for ``${VAR}`` references (tests, embedding).
    """
    config, errors = check_as(root, path, env)
    if errors:
        raise errors[0]  # the first in file order
    assert config is not None  # no errors: a configuration
    return config


def check_as(
    root: type[Root], path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> tuple[Root | None, list[ConfigError]]:
    """Like :func:`load_as`, but every error of the file instead of the first.

    Returns the configuration and no errors, or None and each wrong key's error in the order
    of the file's lines, each naming its line (one error when the file cannot be read or parsed
    as YAML, or a ``${VAR}`` is unset). An error about a key the file lacks names the line of
    its section, or none when the section is missing too: those come last.
    """
    errors: list[ConfigError] = []
    try:
        source = os.fspath(path)
        text = read_source(source)
        data = parse_yaml(text, source)
        return parse_as(root, data, source, env=env, errors=errors, lines=key_lines(text)), []
    except SectionInvalid:
        # The walk goes section by section in the schema's order; the file's order is the reader's.
        return None, sorted(errors, key=lambda e: e.line if e.line is not None else math.inf)
    except ConfigError as exc:
        return None, [exc]


def parse_as(
    root: type[Root],
    data: Mapping[str, Any] | None,
    source: str = "<dict>",
    env: Mapping[str, str] | None = None,
    errors: list[ConfigError] | None = None,
    lines: Mapping[str, int] | None = None,
) -> Root:
    """Validate already-parsed data (what ``yaml.safe_load`` returns) into the dataclass ``root``.

    ``${VAR}`` references are interpolated here too, so a dict and the equivalent file give
    the same result. ``root`` must have a ``source`` field: it is set to ``source``.
    With ``errors`` (a list), the walk collects into it and raises
    :class:`~jetkafka.config._validate.SectionInvalid` at the end (see :class:`Walker`).
    ``lines`` (from :func:`key_lines`) gives each error the line of its key.
    """
    if data is None:
        raise ConfigError(source, "", "the configuration is empty (or holds only comments)", _START_HINT)
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            "",
            f"the top level must be a mapping of sections (zookeeper:, kafka:, channel:, ...), "
            f"got {yaml_type(data)}",
            _START_HINT,
        )
    try:
        resolved = interpolate(data, os.environ if env is None else env)
    except Invalid as exc:
        raise ConfigError(source, exc.key, exc.problem, exc.fix, line_of(lines or {}, exc.key)) from None
    config = Walker(source, root, errors, lines).build(root, resolved)
    return dataclasses.replace(config, source=source)  # type: ignore[no-any-return]


def config_to_dict(config: Any, *, mask_secrets: bool = True) -> dict[str, Any]:
    """A configuration (or one of its sections) as plain YAML data, keyed as in the file.

    Secrets are replaced by ``***`` unless ``mask_secrets`` is false; ``source`` is left out.
    """
    return _to_data(config, "", mask_secrets)  # type: ignore[no-any-return]


def _to_data(value: Any, path: str, mask: bool) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if not f.metadata.get("yaml", True):
                continue
            key = f.metadata.get("key") or f.name
            out[key] = _to_data(getattr(value, f.name), join_path(path, key), mask)
        return out
    if mask and value is not None and is_secret(path):
        return "***"
    if isinstance(value, Mapping):
        return {k: _to_data(v, join_path(path, str(k)), mask) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_to_data(v, join_path(path, i), mask) for i, v in enumerate(value)]
    return value


def key_lines(text: str) -> dict[str, int]:
    """The line (from 1) each key and list item of ``text`` is written on, by its dotted path
    as error messages write it (``channel.topics[0]``, ``kafka.fetch.max.bytes``).

    Keys brought in by a YAML merge (``<<: *base``) are left out: their errors name the line of
    the mapping they were merged into.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    walking: set[int] = set()  # an alias may refer to a node that holds it

    def walk(node: yaml.Node, path: str) -> None:
        if id(node) in walking:
            return
        walking.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                sub = join_path(path, key.value)
                lines.setdefault(sub, key.start_mark.line + 1)
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                sub = join_path(path, index)
                lines.setdefault(sub, item.start_mark.line + 1)
                walk(item, sub)
        walking.discard(id(node))

    if root is not None:
        walk(root, "")
    return lines


def read_source(source: str) -> str:
    try:
        with open(source, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ConfigError(
            source,
            "",
            "file not found",
            f"check the path (relative paths start at {os.getcwd()}); {_START_HINT}",
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            source, "", "is a directory, not a file", "pass the path of the YAML file itself"
        ) from None
    except PermissionError:
        raise ConfigError(
            source, "", "cannot be read: permission denied", "grant read access to the user running jetkafka"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            source,
            "",
            f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
            "save the file as UTF-8",
        ) from None
    except OSError as exc:
        raise ConfigError(
            source, "", f"cannot be read: {exc.strerror or exc}", "check the path and the disk"
        ) from None


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"invalid YAML: {exc}", _GENERIC_YAML_FIX) from None


_GENERIC_YAML_FIX = (
    "check the indentation on and above that line (keys of one section must line up, spaces only), "
    "and quote values that contain ': ' or ' #', or start with one of * & ! % @ ` { [ |"
)

# (fragment of PyYAML's problem text, fix) - the first match wins.
_YAML_FIXES: tuple[tuple[str, str], ...] = (
    (
        "mapping values are not allowed",
        "quote a value that contains ': ' (e.g. url: \"http://h:1\"), or fix the indentation of this line",
    ),
    ("'\\t'", "indent with spaces: YAML does not allow tab characters"),
    ("expected <block end>", "this line's indentation does not line up with the keys above it"),
    ("could not find expected ':'", "add ': ' after the key, or fix the indentation of the line"),
    ("end of stream", "close the quote, bracket or brace that is still open"),
    ("expected ',' or ']'", "close the list with ']' and separate items with ', '"),
    ("expected ',' or '}'", "close the mapping with '}' and separate entries with ', '"),
    ("undefined alias", "'*' starts a YAML alias; quote values that start with '*'"),
    ("cannot start any token", "quote the value: it starts with a character YAML reserves"),
    ("another document", "the file must hold one YAML document; remove the extra '---'"),
)


def _yaml_error(exc: yaml.MarkedYAMLError, text: str, source: str) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "syntax error"
    if mark is None:
        return ConfigError(source, "", f"invalid YAML: {problem}", _GENERIC_YAML_FIX)
    line, column = mark.line + 1, mark.column + 1
    message = f"invalid YAML at line {line}, column {column}: {problem}"
    cmark = exc.context_mark
    if exc.context and cmark is not None and cmark.line != mark.line:
        message += f" ({exc.context} started at line {cmark.line + 1})"
    lines = text.splitlines()
    if 0 <= mark.line < len(lines):
        shown = lines[mark.line]
        # A raw secret written in the file must not be echoed to a terminal or a log.
        if not is_secret(shown):
            message += f"\n    {shown}\n    {' ' * mark.column}^"
    fix = next((hint for fragment, hint in _YAML_FIXES if fragment in problem), _GENERIC_YAML_FIX)
    if 0 <= mark.line < len(lines) and mark.column >= 1 and lines[mark.line][mark.column - 1 : mark.column + 1] == "${":
        fix = _flow_reference_fix(lines[mark.line], mark.column - 1)
    return ConfigError(source, "", message, fix)


def _flow_reference_fix(line: str, start: int) -> str:
    """The fix for an unquoted ``${NAME}`` inside ``[ ]`` or ``{ }`` (``topics: [${TOPIC}]``),
    whose braces YAML takes for its own syntax: quote the reference, or write a block list."""
    end = line.find("}", start)
    reference = line[start : end + 1] if end > start else "${NAME}"
    key = re.search(r"([\w.-]+):\s*[\[{][^\[{]*$", line[:start])
    if key is None:
        return f'quote the reference: ["{reference}"], or write the list as indented lines ("- {reference}")'
    return (
        f'quote the reference: {key.group(1)}: ["{reference}"], or write the list as indented '
        f'lines under {key.group(1)}: ("- {reference}")'
    )
