"""How values are shown in messages, and how environment-produced strings become scalars.

Messages show a value the way it was written in YAML together with its YAML type
(``'four' (a string)``), and never show the value of a secret key.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from jetkafka.config._fields import is_secret
from jetkafka.config._interpolate import Interpolated


def as_bool(value: Any) -> bool | None:
    """A YAML boolean, or an environment-produced string spelling one; None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Interpolated):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
    return None


def as_number(value: Any, hint: type) -> Any:
    """``value`` as ``hint`` (int or float), or None when it is not one; booleans never count."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Interpolated):
        try:
            return int(value.strip()) if hint is int else float(value.strip())
        except ValueError:
            return None
    if hint is int:
        return value if isinstance(value, int) else None
    return float(value) if isinstance(value, (int, float)) else None


def plain(value: Any) -> Any:
    """YAML data with marked strings turned back into plain ``str``."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def num(number: float | None) -> str:
    """A bound or value as a person writes it (``30``, not ``30.0``)."""
    if number is None:
        return ""
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def yaml_type(value: Any) -> str:
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, Interpolated):
        names = ", ".join("${" + v + "}" for v in value.variables)
        return f"a string, from {names}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    if isinstance(value, bytes):
        return "binary data"
    return type(value).__name__


def yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def describe_scalar(value: Any, path: str) -> str:
    if is_secret(path):
        return "<hidden>"
    return repr(str(value)) if isinstance(value, str) else yaml_scalar(value)


def describe(value: Any, path: str) -> str:
    """``'four' (a string)``: the value as written, and its YAML type; secrets stay hidden."""
    if value is None:
        return "nothing (an empty value)"
    if is_secret(path):
        return f"<hidden> ({yaml_type(value)})"
    if isinstance(value, (list, Mapping)):
        shown = repr(plain(value))
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f"{shown} ({yaml_type(value)})"
    return f"{describe_scalar(value, path)} ({yaml_type(value)})"


def example_for(meta: Mapping[str, Any], hint: Any) -> str:
    if meta.get("example") is not None:
        return str(meta["example"])
    default = meta.get("default")
    if isinstance(default, bool):
        return yaml_scalar(default)
    if isinstance(default, (int, float)):
        return num(default)
    if isinstance(default, str) and default:
        return default
    if meta.get("choices"):
        return str(meta["choices"][0])
    if hint is bool:
        return "true"
    if hint is int or hint is float:
        low = meta.get("min")
        return num(low) if low is not None else "1"
    return "..."
