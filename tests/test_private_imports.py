"""No module of jetkafka uses another module's private names.

A leading underscore on a name inside a module means "this module's own": whatever it names may
change with the module. (A leading underscore on a module means "internal to jetkafka": the
library's modules import each other's internal modules freely; users do not, see
tests/test_public_surface.py.)
Code shared by several modules gets a public name in the module whose idea it is (e.g.
:func:`jetkafka.coordination._session.zookeeper_session`, :mod:`jetkafka.ops._command_line`).
The rule is the strictest one, "another module" and not merely "another package", because no
module needs the looser one. Tests may reach into privates; they are not scanned.

Scanned: ``from M import _x`` and ``from M import _x as y`` (any module M of jetkafka, the
importing package's own modules included), ``import jetkafka._m`` and a module's private
attribute read through a name bound to a jetkafka module (``from jetkafka.ops import commands``
then ``commands._setup``). Dunder names (``__version__``) are public.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import jetkafka

PACKAGE_ROOT = Path(jetkafka.__file__).parent


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The module ``node`` imports from, with a relative import resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # A package's __init__ is its own level-1 base; a plain module's is its package.
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join(base + ([node.module] if node.module else []))


def is_jetkafka_module(name: str) -> bool:
    return name == "jetkafka" or name.startswith("jetkafka.")


def module_exists(name: str, root: Path) -> bool:
    """Whether ``name`` is a module or package of the source tree whose package is ``root``."""
    base = root.parent / Path(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else [*head, node.attr]
    return None


def violations(path: Path, root: Path) -> Iterator[str]:
    module = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules: dict[str, str] = {}  # local name -> the jetkafka module it is bound to
    where = path.relative_to(root.parent).as_posix()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(module, node, path.name == "__init__.py")
            if not is_jetkafka_module(source) or source == module:
                continue
            for alias in node.names:
                if module_exists(f"{source}.{alias.name}", root):  # a module, internal or not
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif is_private(alias.name):
                    yield f"{where}:{node.lineno}: from {source} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not is_jetkafka_module(alias.name):
                    continue
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        chain = dotted(node.value)
        if chain is None or chain[0] not in modules:
            continue
        target = ".".join([modules[chain[0]], *chain[1:]])
        if module_exists(f"{target}.{node.attr}", root):  # a module reached by attribute
            continue
        if target != module and module_exists(target, root):
            yield f"{where}:{node.lineno}: {'.'.join(chain)}.{node.attr}"


def all_violations(root: Path) -> list[str]:
    return [v for path in sorted(root.rglob("*.py")) for v in violations(path, root)]


def test_no_module_uses_another_modules_private_names() -> None:
    found = all_violations(PACKAGE_ROOT)
    assert not found, (
        "private names used across modules (give the shared thing a public name in the module "
        "whose idea it is):\n" + "\n".join(found)
    )


def test_the_scan_finds_each_kind_of_use(tmp_path: Path) -> None:
    """The scan itself: a tree with every kind of cross-module private use, and allowed ones."""
    package = tmp_path / "jetkafka"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '0'\n")
    (package / "ops" / "__init__.py").write_text("")
    (package / "ops" / "commands.py").write_text("def _setup(): ...\ndef public(): ...\n")
    (package / "ops" / "own.py").write_text(
        "def _helper(): ...\n"
        "_helper()\n"  # its own private: allowed
        "from jetkafka import __version__\n"  # a dunder: allowed
        "from jetkafka.ops.commands import public as _public\n"  # a public name, bound privately: allowed
    )
    (package / "ops" / "_internal.py").write_text("def _own(): ...\ndef shared(): ...\n")
    (package / "user.py").write_text(
        "from jetkafka.ops.commands import _setup\n"
        "from jetkafka.ops import commands\n"
        "import jetkafka.ops.commands as cmds\n"
        "import jetkafka.ops.commands\n"
        "commands._setup()\n"
        "cmds._setup()\n"
        "jetkafka.ops.commands._setup()\n"
        "from jetkafka.ops import _internal\n"  # an internal module: allowed
        "import jetkafka.ops._internal\n"  # likewise
        "_internal.shared()\n"  # its public name: allowed
        "_internal._own()\n"
        "jetkafka.ops._internal._own()\n"
    )
    (package / "ops" / "sibling.py").write_text("from .commands import _setup\n")
    found = all_violations(package)
    assert found == [
        "jetkafka/ops/sibling.py:1: from jetkafka.ops.commands import _setup",
        "jetkafka/user.py:1: from jetkafka.ops.commands import _setup",
        "jetkafka/user.py:5: commands._setup",
        "jetkafka/user.py:6: cmds._setup",
        "jetkafka/user.py:7: jetkafka.ops.commands._setup",
        "jetkafka/user.py:11: _internal._own",
        "jetkafka/user.py:12: jetkafka.ops._internal._own",
    ], found
