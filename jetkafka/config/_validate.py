"""Generic validation: YAML data in, frozen dataclasses out, one precise error otherwise.

A :class:`Walker` made with ``errors=[]`` collects instead: each key of each section, entry of
a mapping (``kafka:``) or item of a list that is wrong adds its error to that list and the walk
goes on with the next one, so ``jetkafka
validate`` can report every error of a file at once. A section with an error is not built (its
own cross-key checks need every key valid), and so neither is any section around it.

The walker reads each dataclass's fields, type hints and ``spec()`` metadata; it knows the
types a schema may use (str, int, float, bool, ``X | None``, unions of scalars, ``tuple[X, ...]``,
``Mapping[str, X]``, nested dataclasses and ``Any``) and nothing about particular sections.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from jetkafka.config._describe import (
    as_bool,
    as_number,
    describe,
    describe_scalar,
    example_for,
    num,
    plain,
    yaml_scalar,
    yaml_type,
)
from jetkafka.config._fields import FrozenMap, Invalid, Origin, is_secret, join_path, line_of
from jetkafka.config._interpolate import Interpolated
from jetkafka.errors import ConfigError, JetkafkaError


class SectionInvalid(JetkafkaError):
    """Raised by a collecting :class:`Walker` out of a section whose errors it has collected
    (never out of :func:`~jetkafka.config.check_config`, which returns those errors)."""


class Walker:
    """Validates data against a root dataclass; every error names ``source``.

    Without ``errors`` the first error is raised; with a list, errors are appended to it and
    :class:`SectionInvalid` is raised out of the root once the whole data has been walked.
    With ``lines`` (dotted key path to line, from the file), each error names its key's line,
    and a section with an ``origin`` field is given its :class:`~jetkafka.config._fields.Origin`.
    """

    def __init__(
        self,
        source: str,
        root: type,
        errors: list[ConfigError] | None = None,
        lines: Mapping[str, int] | None = None,
    ) -> None:
        self.source = source
        self.root = root
        self.errors = errors
        # Dotted key path -> line of the file; empty for data that came from a dict.
        self.lines: Mapping[str, int] = lines or {}

    def _collect(self, exc: ConfigError) -> None:
        """Record ``exc`` when collecting; raise it otherwise."""
        if self.errors is None:
            raise exc
        self.errors.append(exc)

    def error(self, path: str, problem: str, fix: str = "") -> ConfigError:
        return ConfigError(self.source, path, problem, fix, line_of(self.lines, path))

    # -- sections ---------------------------------------------------------------------------

    def build(self, cls: type, data: Any, path: str = "") -> Any:
        if not isinstance(data, Mapping):
            what = "must be a section (a mapping of keys)" if path else "the top level must be a mapping"
            example = _section_example(cls, path)
            raise self.error(
                path,
                f"{what}, got {describe(data, path)}",
                f"write it as indented 'key: value' lines, e.g.\n{example}",
            )
        fields = _yaml_fields(cls)
        failed = False
        for key in data:
            try:
                self._check_key(cls, path, key, fields)
            except ConfigError as exc:
                self._collect(exc)
                failed = True
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        for key, f in fields.items():
            try:
                if key in data:
                    kwargs[f.name] = self._field(key, f, hints[f.name], data[key], path)
                elif _is_required(f):
                    raise self._missing(cls, path, key, f)
            except ConfigError as exc:
                self._collect(exc)
                failed = True
            except SectionInvalid:
                failed = True
        if failed:
            raise SectionInvalid(path)
        try:
            section = cls(**kwargs)
        except Invalid as exc:
            raise self.error(join_path(path, exc.key) if exc.key else path, exc.problem, exc.fix) from None
        if "origin" in _init_fields(cls):
            section = dataclasses.replace(section, origin=self._origin(path))
        return section

    def _origin(self, path: str) -> Origin:
        inside = (path + ".", path + "[") if path else ("",)
        lines = {p: n for p, n in self.lines.items() if p == path or p.startswith(inside)}
        return Origin(self.source, path, FrozenMap(lines))

    def _check_key(self, cls: type, path: str, key: Any, fields: Mapping[str, Any]) -> None:
        if not isinstance(key, str):
            raise self.error(
                join_path(path, str(key)),
                f"keys must be strings, got {key!r} ({yaml_type(key)})",
                f'quote the key: "{key}":',
            )
        if key not in fields:
            raise self._unknown_key(cls, path, key, fields)

    def _field(self, key: str, f: dataclasses.Field[Any], hint: Any, value: Any, path: str) -> Any:
        sub = join_path(path, key)
        section = _dataclass_of(hint)
        if value is None and _is_required(f):
            if section is not None:
                raise self.error(
                    sub,
                    "required section is empty",
                    f"fill it in, e.g.\n{_section_example(section, sub)}",
                )
            raise self.error(sub, "required key has no value", f"give it a value, e.g. {key}: {_example(f, hint)}")
        if value is None and section is not None and not _is_optional(hint):
            # A section whose keys are all commented out means "all defaults".
            value = {}
        meta = {**f.metadata, "default": f.default}
        return self.convert(value, hint, sub, meta, key)

    def _unknown_key(self, cls: type, path: str, key: str, fields: Mapping[str, Any]) -> ConfigError:
        sub = join_path(path, key)
        noun = "key" if path else "section"
        problem = f"unknown {noun}"
        close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
        if close:
            problem += f". Did you mean '{close[0]}'?"
        known = ", ".join(fields)
        fix = f"known keys in {path}: {known}" if path else f"known sections: {known}"
        if close:
            fix = f"rename it to '{close[0]}'; " + fix
        home = [] if close else self._sections_with(key)
        if home:
            fix = f"'{key}' belongs under {home[0]}: (move it there); " + fix
        elif "." in key and not close:
            fix = f"'{key}' looks like a librdkafka property; put it under kafka:; " + fix
        return self.error(sub, problem, fix)

    def _sections_with(self, key: str) -> list[str]:
        found: list[str] = []
        for section, cls in _sections(self.root):
            if key in _yaml_fields(cls):
                found.append(section)
        return found

    def _missing(self, cls: type, path: str, key: str, f: dataclasses.Field[Any]) -> ConfigError:
        sub = join_path(path, key)
        hint = _hints(cls)[f.name]
        target = _dataclass_of(hint)
        doc = f.metadata.get("doc", "")
        if target is not None:
            return self.error(
                sub,
                "required section is missing" + (f" ({doc})" if doc else ""),
                f"add it, e.g.\n{_section_example(target, sub)}",
            )
        where = f" under {path}:" if path else ""
        noun = "key" if path else "section"
        return self.error(
            sub,
            f"required {noun} is missing" + (f" ({doc})" if doc else ""),
            f"add it{where}, e.g. {key}: {_example(f, hint)}",
        )

    # -- values -----------------------------------------------------------------------------

    def convert(self, value: Any, hint: Any, path: str, meta: Mapping[str, Any], key: str) -> Any:
        if hint is Any:
            return plain(value)
        target = _dataclass_of(hint)
        if target is not None and not _is_optional(hint):
            return self.build(target, value, path)
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            args = typing.get_args(hint)
            rest = [a for a in args if a is not type(None)]
            if value is None and len(rest) < len(args):
                return None
            if len(rest) == 1:
                return self.convert(value, rest[0], path, meta, key)
            return self._scalar_union(value, rest, path, meta, key)
        if origin is tuple:
            return self._tuple(value, hint, path, meta, key)
        if origin in (Mapping, dict, typing.Mapping):
            return self._mapping(value, hint, path, meta, key)
        if hint in (str, int, float, bool):
            return self._scalar(value, hint, path, meta, key)
        raise TypeError(f"configuration schema uses an unsupported type at {path}: {hint!r}")

    def _type_error(self, value: Any, expected: str, path: str, fix: str) -> ConfigError:
        got = describe(value, path)
        return self.error(path, f"expected {expected}, got {got}", fix)

    def _scalar(self, value: Any, hint: type, path: str, meta: Mapping[str, Any], key: str) -> Any:
        example = f"{key}: {example_for(meta, hint)}"
        if hint is bool:
            result = as_bool(value)
            if result is None:
                guess = as_bool(Interpolated(str(value), ())) if isinstance(value, (str, int)) else None
                if guess is not None:
                    example = f"{key}: {yaml_scalar(guess)}"
                raise self._type_error(value, "true or false", path, f"write {example}")
            return result
        if hint is int or hint is float:
            number = as_number(value, hint)
            if number is None:
                fix = f"write {example}"
                if isinstance(value, str) and not isinstance(value, Interpolated):
                    if value.strip().lstrip("+-").replace(".", "", 1).isdigit():
                        fix = f"remove the quotes: {key}: {value.strip()}"
                    elif key.endswith(("_ms", "_s")):
                        fix += " (a plain number: the unit is in the key name)"
                expected = "an integer" if hint is int else "a number"
                raise self._type_error(value, expected, path, fix)
            self._range(number, path, meta, key)
            return number
        if not isinstance(value, str):
            shown = "<value>" if is_secret(path) else yaml_scalar(value)
            raise self._type_error(value, "a string", path, f'quote it: {key}: "{shown}"')
        text = written = str(value)
        normalize = meta.get("normalize")
        if normalize is not None:
            text = normalize(text)
        if meta.get("nonempty") and not text.strip():
            raise self.error(path, "must not be empty", f"write {example}")
        choices = meta.get("choices")
        if choices and text not in choices:
            problem = f"{describe_scalar(written, path)} is not one of {', '.join(choices)}"
            lowered = {c.lower(): c for c in choices}
            close = difflib.get_close_matches(text.lower(), list(lowered), n=1, cutoff=0.6)
            if close:
                problem += f". Did you mean '{lowered[close[0]]}'?"
                fix = f"{key}: {lowered[close[0]]}"
            else:
                fix = f"{key}: {choices[0]}"
            raise self.error(path, problem, fix)
        check = meta.get("check")
        if check is not None:
            try:
                check(text)
            except Invalid as exc:
                raise self.error(
                    join_path(path, exc.key) if exc.key else path, exc.problem, exc.fix
                ) from None
        return text

    def _range(self, number: float, path: str, meta: Mapping[str, Any], key: str) -> None:
        low, high = meta.get("min"), meta.get("max")
        if isinstance(number, float) and not math.isfinite(number):
            raise self.error(
                path, f"{number} is not a finite number", f"write {key}: {example_for(meta, float)}"
            )
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = f"{num(low)}..{num(high) if high is not None else ''}"
            raise self.error(
                path,
                f"{num(number)} is out of range {bounds}",
                f"use a value in {bounds}, e.g. {key}: {example_for(meta, type(number))}",
            )

    def _scalar_union(self, value: Any, args: list[Any], path: str, meta: Mapping[str, Any], key: str) -> Any:
        for arg in args:
            if arg is bool and isinstance(value, bool):
                return value
            if arg is str and isinstance(value, str):
                return str(value)
            if arg in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
                if arg is int and isinstance(value, float):
                    continue
                return value
        names = {str: "a string", int: "a number", float: "a number", bool: "a boolean"}
        kinds = list(dict.fromkeys(names.get(a, getattr(a, "__name__", str(a))) for a in args))
        expected = ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
        fix = f'write one value, e.g. {key}: "..."'
        if isinstance(value, Mapping):
            fix = "write properties as flat dotted keys (bootstrap.servers: host:9092), not nested mappings"
        elif isinstance(value, list):
            fix = f'join several values with commas in one string: {key}: "a,b"'
        elif value is None:
            fix = f"give {key} a value, or delete the line"
        raise self._type_error(value, expected, path, fix)

    def _tuple(self, value: Any, hint: Any, path: str, meta: Mapping[str, Any], key: str) -> tuple[Any, ...]:
        args = typing.get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"configuration schema: only tuple[X, ...] is supported at {path}")
        if not isinstance(value, list):
            shown = "<value>" if is_secret(path) else yaml_scalar(value)
            example = (
                f"{key}: [{shown}]" if isinstance(value, (str, int)) else f"{key}: {example_for(meta, tuple)}"
            )
            raise self._type_error(value, "a list", path, f"write a YAML list, e.g. {example}")
        if meta.get("nonempty") and not value:
            raise self.error(
                path,
                "must not be an empty list",
                f"list at least one item, e.g. {key}: {example_for(meta, tuple)}",
            )
        converted: list[Any] = []
        failed = False
        for i, item in enumerate(value):
            try:
                converted.append(self.convert(item, args[0], join_path(path, i), meta, key))
            except ConfigError as exc:
                self._collect(exc)
                failed = True
            except SectionInvalid:
                failed = True
        if failed:
            raise SectionInvalid(path)
        items = tuple(converted)
        if meta.get("unique"):
            seen: set[Any] = set()
            for i, item in enumerate(items):
                if item in seen:
                    raise self.error(
                        join_path(path, i),
                        f"{describe_scalar(item, path)} is listed more than once",
                        "list each item once",
                    )
                seen.add(item)
        return items

    def _mapping(
        self, value: Any, hint: Any, path: str, meta: Mapping[str, Any], key: str
    ) -> FrozenMap[str, Any]:
        key_type, value_type = typing.get_args(hint) or (str, Any)
        if not isinstance(value, Mapping):
            raise self._type_error(
                value, "a mapping", path, f"write indented 'name: value' lines under {key}:"
            )
        if meta.get("nonempty") and not value:
            raise self.error(
                path, "must not be empty", f"add at least one entry, e.g. {key}: {example_for(meta, dict)}"
            )
        out: dict[str, Any] = {}
        failed = False
        for k, v in value.items():
            sub = join_path(path, str(k))
            try:
                if key_type is str and not isinstance(k, str):
                    raise self.error(
                        sub, f"keys must be strings, got {k!r} ({yaml_type(k)})", f'quote the key: "{k}":'
                    )
                out[k] = self.convert(v, value_type, sub, meta, str(k))
            except ConfigError as exc:
                self._collect(exc)
                failed = True
            except SectionInvalid:
                failed = True
        if failed:
            raise SectionInvalid(path)
        return FrozenMap(out)


# -- helpers (pure functions, cached per class) ------------------------------------------------


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _init_fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


@cache
def _yaml_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    out: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        if f.init and f.metadata.get("yaml", True):
            out[f.metadata.get("key") or f.name] = f
    return out


def _sections(root: type, prefix: str = "") -> list[tuple[str, type]]:
    found: list[tuple[str, type]] = []
    hints = _hints(root)
    for key, f in _yaml_fields(root).items():
        target = _dataclass_of(hints[f.name])
        if target is not None:
            path = join_path(prefix, key)
            found.append((path, target))
            found.extend(_sections(target, path))
    return found


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass of ``hint`` or of ``hint | None``."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if _is_optional(hint):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1 and isinstance(rest[0], type) and dataclasses.is_dataclass(rest[0]):
            return rest[0]
    return None


def _example(f: dataclasses.Field[Any], hint: Any) -> str:
    return example_for({**f.metadata, "default": f.default}, hint)


def _section_example(cls: type, path: str) -> str:
    """A few indented lines showing the section's required keys (its first key when none is)."""
    hints = _hints(cls)
    lines = [f"  {path.rsplit('.', 1)[-1]}:" if path else ""]
    fields = _yaml_fields(cls)
    required = [
        (key, f)
        for key, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    # A section of optional keys only: show one of them, so the example is never an empty section.
    for key, f in required or list(fields.items())[:1]:
        lines.append(f"    {key}: {_example(f, hints[f.name])}")
    return "\n".join(line for line in lines if line)
