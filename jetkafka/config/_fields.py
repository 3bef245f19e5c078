"""Building blocks of the configuration schema: field metadata, read-only mappings, secrets.

A schema section is a frozen dataclass. Each field carries its YAML-facing rules in
``field(metadata=spec(...))``; the loader reads them generically, so adding a section means
writing a dataclass and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jetkafka.errors import ConfigError, JetkafkaError

K = TypeVar("K")
V = TypeVar("V")


class Invalid(JetkafkaError, ValueError):
    """A rule of a section is broken.

    Raised by a section's ``__post_init__`` (cross-field rules) or by a field's ``check``
    callable. ``key`` is relative to the section (``"fixed_count"``, ``"partitions.orders"``,
    or ``""`` for the value being checked); the loader prefixes the section's path and turns it
    into a :class:`~jetkafka.errors.ConfigError` that names the file.
    """

    def __init__(self, key: str, problem: str, fix: str = "") -> None:
        self.key = key
        self.problem = problem
        self.fix = fix
        text = f"{key}: {problem}" if key else problem
        super().__init__(text + (f" (fix: {fix})" if fix else ""))


def spec(
    doc: str,
    *,
    key: str | None = None,
    example: str | None = None,
    min: float | None = None,  # noqa: A002 - reads naturally at the call site
    max: float | None = None,  # noqa: A002 - as min
    choices: Sequence[str] | None = None,
    normalize: Callable[[str], str] | None = None,
    nonempty: bool = False,
    unique: bool = False,
    check: Callable[[Any], None] | None = None,
    yaml: bool = True,
) -> dict[str, Any]:
    """Metadata for ``dataclasses.field(metadata=...)``.

    - ``doc``: one line for the reference and for error fixes.
    - ``key``: the YAML key when it differs from the attribute (``class`` vs ``class_path``).
    - ``example``: a YAML value shown in fixes (``"[orders]"``); defaults to the field default.
    - ``min``/``max``: inclusive bounds of every number in the value.
    - ``choices``: allowed strings; ``normalize`` maps input before the comparison
      (``str.upper`` makes the choice case-insensitive and stores the normalized form).
    - ``nonempty``/``unique``: apply to strings, lists and mappings in the value.
    - ``check``: called with every string in the value; raises :class:`Invalid` with key ``""``.
    - ``yaml=False``: the attribute is not read from the file (``source``).
    """
    return {
        "doc": doc,
        "key": key,
        "example": example,
        "min": min,
        "max": max,
        "choices": tuple(choices) if choices is not None else None,
        "normalize": normalize,
        "nonempty": nonempty,
        "unique": unique,
        "check": check,
        "yaml": yaml,
    }


class FrozenMap(Mapping[K, V]):
    """A read-only mapping that, unlike ``types.MappingProxyType``, pickles and hashes.

    Configurations travel to worker processes (Spark executors, spawned children), so every
    part of them must pickle. Hashing works when the values are hashable.
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        # Configurations get logged; credentials among the values must not be.
        shown = {k: "***" if isinstance(k, str) and is_secret(k) else v for k, v in self._data.items()}
        return f"FrozenMap({shown!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (self._data,))


def freeze(mapping: Mapping[K, V] | None) -> FrozenMap[K, V]:
    """``mapping`` as a :class:`FrozenMap` (the same object when it already is one)."""
    if isinstance(mapping, FrozenMap):
        return mapping
    return FrozenMap(mapping or {})


# Keys whose values may be credentials; their values never appear in an error message.
_SECRET_KEY = re.compile(
    r"password|passwd|secret|credential|sasl\.jaas|ssl\.key|token",
    re.IGNORECASE,
)


def is_secret(key_path: str) -> bool:
    """Whether the value at ``key_path`` must be masked in messages."""
    return bool(_SECRET_KEY.search(key_path))


def join_path(parent: str, key: object) -> str:
    """The dotted path of ``key`` below ``parent``; list indexes are written ``[i]``."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


_LAST_STEP = re.compile(r"(\[\d+\]|\.[^.\[]*)$")


def line_of(lines: Mapping[str, int], key_path: str) -> int | None:
    """The line ``key_path`` is written on, else that of the closest section around it that is
    written (a missing key: its section's line); None when nothing of it is in the file."""
    path = key_path
    while path:
        line = lines.get(path)
        if line is not None:
            return line
        shorter = _LAST_STEP.sub("", path)
        if shorter == path:
            return None
        path = shorter
    return None


@dataclass(frozen=True)
class Origin:
    """Where a section was written: the file, the section's dotted path, the lines of its keys.

    Kept by a section that is used after the file was read (the processor is built when the
    channel starts), so that what goes wrong then is reported like a configuration error:
    ``FILE:LINE: processor.options: ...``. A section built in Python has no file: its messages
    name the key alone.
    """

    source: str | None = None
    path: str = ""
    lines: FrozenMap[str, int] = field(default_factory=FrozenMap)

    def message(self, key: str, problem: str, fix: str = "") -> str:
        """The text of a :class:`~jetkafka.errors.ConfigError` about ``key`` of this section."""
        full = join_path(self.path, key) if key else self.path
        if self.source is None:
            return (f"{full}: {problem}" if full else problem) + (f"\n  fix: {fix}" if fix else "")
        return str(ConfigError(self.source, full, problem, fix, line_of(self.lines, full)))
