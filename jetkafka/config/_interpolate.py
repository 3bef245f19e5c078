"""``${VAR}`` environment interpolation in configuration values.

Every string value of the file (at any depth, including ``kafka:`` properties and
``processor.options``) may reference environment variables:

- ``${NAME}``: the variable's value; an unset variable is an error.
- ``${NAME:-default}``: the value, or ``default`` when the variable is unset or empty.
- ``$${``: a literal ``${``.

Keys are never interpolated. Substituted strings are marked, so a value that was entirely
produced from the environment (``threads: ${THREADS:-4}``) can still fill a number or boolean
field; a string written literally in the file never is, to keep ``"4"`` a type error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jetkafka.config._fields import Invalid, is_secret, join_path

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Interpolated(str):
    """A string produced by substituting environment variables; remembers their names."""

    variables: tuple[str, ...]

    def __new__(cls, value: str, variables: tuple[str, ...]) -> Interpolated:
        obj = super().__new__(cls, value)
        obj.variables = variables
        return obj


def interpolate(tree: Any, env: Mapping[str, str], path: str = "") -> Any:
    """A copy of ``tree`` (YAML data) with every string value interpolated.

    Raises :class:`Invalid` whose ``key`` is the full dotted path of the offending value.
    """
    if isinstance(tree, str):
        return _substitute(tree, env, path)
    if isinstance(tree, Mapping):
        return {key: interpolate(value, env, join_path(path, str(key))) for key, value in tree.items()}
    if isinstance(tree, list):
        return [interpolate(item, env, join_path(path, index)) for index, item in enumerate(tree)]
    return tree


def _substitute(text: str, env: Mapping[str, str], path: str) -> str:
    if "$" not in text:
        return text
    out: list[str] = []
    used: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$${", i):
            out.append("${")
            i += 3
            continue
        if not text.startswith("${", i):
            out.append(text[i])
            i += 1
            continue
        end = text.find("}", i + 2)
        if end < 0:
            raise Invalid(
                path,
                f"unterminated ${{ in {_show(text, path)}",
                "close the reference as ${NAME}, or write $${ for a literal ${",
            )
        body = text[i + 2 : end]
        name, sep, default = body.partition(":-")
        if not _NAME.fullmatch(name):
            raise Invalid(
                path,
                f"${{{body}}} is not a valid reference in {_show(text, path)}",
                "write ${NAME} or ${NAME:-default} (NAME: letters, digits, underscores, not "
                "starting with a digit), or $${ for a literal ${",
            )
        value = env.get(name)
        if value is None or (sep and value == ""):
            if not sep:
                raise Invalid(
                    path,
                    f"environment variable {name} is not set",
                    f"export it, or write ${{{name}:-default}}",
                )
            value = default
        out.append(value)
        used.append(name)
        i = end + 1
    result = "".join(out)
    return Interpolated(result, tuple(used)) if used else result


def _show(text: str, path: str) -> str:
    return "a secret value" if is_secret(path) else repr(text)
