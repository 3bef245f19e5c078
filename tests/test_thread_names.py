"""Every thread jetkafka starts has a name that says what it is, ``jetkafka-...``.

Thread names are what an operator reads in the ``thread`` field of the JSON log, in a thread
dump (py-spy, faulthandler) and in a debugger; ``Thread-356`` says nothing. Checked on the
source, so a thread added later without a name fails here rather than in a log.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jetkafka"
# What starts a thread; the keyword that names it (None: only a later `x.name = ...` can).
STARTERS = {"Thread": "name", "Timer": None, "Observer": None, "ThreadPoolExecutor": "thread_name_prefix"}


def _called(node: ast.Call) -> str | None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if name in STARTERS else None


def _is_jetkafka_name(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return isinstance(value.value, str) and value.value.startswith("jetkafka-")
    if isinstance(value, ast.JoinedStr) and value.values:
        first = value.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("jetkafka-")
    return False


def _named_later(function: ast.AST, target: str) -> bool:
    """Whether ``function`` sets ``<target>.name`` to a jetkafka name."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Attribute) and t.attr == "name" and ast.unparse(t.value) == target:
                return _is_jetkafka_name(node.value)
    return False


def unnamed_threads() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for node in ast.walk(function):
                if not isinstance(node, ast.Assign | ast.AnnAssign | ast.Expr | ast.withitem):
                    continue
                call = node.value if not isinstance(node, ast.withitem) else node.context_expr
                if not isinstance(call, ast.Call):
                    continue
                kind = _called(call)
                if kind is None:
                    continue
                keyword = STARTERS[kind]
                named = any(k.arg == keyword and _is_jetkafka_name(k.value) for k in call.keywords)
                if not named and isinstance(node, ast.Assign) and len(node.targets) == 1:
                    named = _named_later(function, ast.unparse(node.targets[0]))
                if not named:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}: {kind}(...) without a jetkafka- name")
    return found


def test_every_thread_jetkafka_starts_is_named() -> None:
    assert unnamed_threads() == []


def test_the_check_finds_an_unnamed_thread(tmp_path: Path, monkeypatch) -> None:
    # The check itself: a package with one unnamed Timer and one well named Thread.
    package = tmp_path / "jetkafka"
    package.mkdir()
    (package / "m.py").write_text(
        "import threading\n\n"
        "def f():\n"
        "    t = threading.Timer(1, print)\n"
        "    u = threading.Thread(target=print, name='jetkafka-x')\n"
        "    v = threading.Timer(1, print)\n"
        "    v.name = f'jetkafka-{1}'\n"
    )
    monkeypatch.setattr(__import__(__name__, fromlist=["PACKAGE"]), "PACKAGE", package)
    assert unnamed_threads() == ["jetkafka/m.py:4: Timer(...) without a jetkafka- name"]
