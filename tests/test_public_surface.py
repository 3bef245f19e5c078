"""The public surface: package roots, ``jetkafka.errors`` and ``jetkafka.events``; all else is internal.

A module whose name has no leading underscore is public API (users may import it and we keep
it stable); so every module is either a package ``__init__``, one of the few public modules, or
marked internal by its name. The docs and examples, which users copy, import only public names.
"""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "jetkafka"
PUBLIC_MODULES = {"jetkafka.errors", "jetkafka.events", "jetkafka.cli"}


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def test_every_module_is_a_package_root_a_public_module_or_marked_internal() -> None:
    unmarked = [
        name
        for name in _modules()
        if not name.rsplit(".", 1)[-1].startswith("_")
        and not (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()
        and name not in PUBLIC_MODULES
    ]
    assert unmarked == [], f"modules neither public nor marked internal (rename to _name.py): {unmarked}"


@pytest.mark.parametrize(
    "package", sorted(n for n in _modules() if (PACKAGE.parent / n.replace(".", "/") / "__init__.py").exists())
)
def test_every_name_a_package_exports_is_there(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in getattr(module, "__all__", []) if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it does not have: {missing}"


_INTERNAL_REFERENCE = re.compile(r"\bjetkafka(?:\.[a-z_]+)*\._[a-z][a-z_]*")


def _user_facing_files() -> list[pathlib.Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").rglob("*.py"))]
    # architecture.md describes the internals on purpose, changes.md names what moved.
    return [f for f in files if f.name not in {"architecture.md", "changes.md"}]


def test_docs_and_examples_use_only_public_names() -> None:
    found = {
        str(f.relative_to(REPO)): sorted(set(_INTERNAL_REFERENCE.findall(f.read_text())))
        for f in _user_facing_files()
    }
    found = {f: refs for f, refs in found.items() if refs}
    assert found == {}, f"docs or examples reach into internal modules: {found}"


def test_the_check_sees_an_internal_reference() -> None:
    assert _INTERNAL_REFERENCE.findall("from jetkafka.spark._arrow import x; jetkafka.ops.reset") == [
        "jetkafka.spark._arrow"
    ]
