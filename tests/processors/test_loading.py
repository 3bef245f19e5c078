"""Importing and building the configured processor class."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jetkafka.config import ProcessorConfig
from jetkafka.errors import ProcessorError
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.processors._loading import load_processor

_names = itertools.count()

GOOD = """
from jetkafka.processors._base import BatchEventProcessor, BatchResponse

class Indexer(BatchEventProcessor):
    def __init__(self, index: str, flush_every: int = 100, tags: list | None = None) -> None:
        if flush_every < 1:
            raise ValueError("flush_every must be at least 1")
        self.index = index
        self.flush_every = flush_every
        self.tags = tags

    def on_next_batch(self, source, events):
        return BatchResponse.advance()

class Flexible(BatchEventProcessor):
    def __init__(self, **settings) -> None:
        self.settings = settings

    def on_next_batch(self, source, events):
        return BatchResponse.advance()

class Unfinished(BatchEventProcessor):
    pass

class NotAProcessor:
    pass

def helper():
    pass

class Outer:
    class Inner(BatchEventProcessor):
        def on_next_batch(self, source, events):
            return BatchResponse.advance()
"""


@pytest.fixture(autouse=True)
def isolated_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    monkeypatch.chdir(tmp_path)


def module(directory: Path, source: str = GOOD) -> str:
    """Write ``source`` as a fresh module in ``directory``; returns its name."""
    name = f"jk_test_processor_{next(_names)}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def load(class_path: str, options: dict[str, Any] | None = None, pythonpath: tuple[str, ...] = ()) -> Any:
    return load_processor(ProcessorConfig(class_path, options or {}), pythonpath)


def error(class_path: str, options: dict[str, Any] | None = None, pythonpath: tuple[str, ...] = ()) -> str:
    with pytest.raises(ProcessorError) as caught:
        load(class_path, options, pythonpath)
    return str(caught.value)


def test_loads_from_the_current_directory(tmp_path: Path) -> None:
    name = module(tmp_path)
    processor = load(f"{name}:Indexer", {"index": "orders", "tags": ["a"]})
    assert (processor.index, processor.flush_every, processor.tags) == ("orders", 100, ["a"])
    assert isinstance(processor, BatchEventProcessor)


def test_loads_from_pythonpath_and_prepends_once(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    name = module(lib)
    load(f"{name}:Outer.Inner", pythonpath=(str(lib),))
    load(f"{name}:Outer.Inner", pythonpath=(str(lib),))
    assert sys.path.count(str(lib)) == 1
    assert sys.path.index(str(lib)) < len(sys.path) - 1


def test_options_are_copies(tmp_path: Path) -> None:
    name = module(tmp_path)
    config = ProcessorConfig(f"{name}:Indexer", {"index": "i", "tags": ["a"]})
    processor: Any = load_processor(config)
    processor.tags.append("b")
    assert config.options["tags"] == ["a"]


def test_bad_format() -> None:
    message = error("no_colon_here")
    assert "processor.class: 'no_colon_here' is not of the form 'package.module:ClassName'" in message
    assert "fix:" in message


def test_module_not_found_names_module_dirs_and_fix(tmp_path: Path) -> None:
    message = error("nowhere_to_be_found:Thing")
    assert "module 'nowhere_to_be_found' not found" in message
    assert str(tmp_path) in message
    assert "--pythonpath DIR" in message


def test_pythonpath_must_be_a_directory(tmp_path: Path) -> None:
    message = error("x:Y", pythonpath=(str(tmp_path / "missing"),))
    assert "--pythonpath" in message and "not a directory" in message


def test_module_importing_a_missing_dependency(tmp_path: Path) -> None:
    name = module(tmp_path, "import jk_surely_not_installed\n")
    message = error(f"{name}:Indexer")
    assert f"importing module '{name}' failed" in message
    assert "jk_surely_not_installed" in message
    assert "install" in message


def test_module_raising_at_import(tmp_path: Path) -> None:
    name = module(tmp_path, "x = 1\nraise RuntimeError('no config for me')\n")
    message = error(f"{name}:Indexer")
    assert "raised RuntimeError: no config for me" in message
    assert f"{name}.py, line 2" in message


def test_module_with_syntax_error(tmp_path: Path) -> None:
    name = module(tmp_path, "def broken(:\n    pass\n")
    message = error(f"{name}:Indexer")
    assert "raised SyntaxError" in message
    assert f"{name}.py, line 1" in message


def test_class_missing_with_suggestion(tmp_path: Path) -> None:
    name = module(tmp_path)
    message = error(f"{name}:Indexr")
    assert f"'{name}' has no attribute 'Indexr'. Did you mean 'Indexer'?" in message
    assert "processor classes in" in message and "Flexible, Indexer" in message


def test_not_a_class(tmp_path: Path) -> None:
    name = module(tmp_path)
    assert "is a function, not a class" in error(f"{name}:helper")


def test_not_a_processor_subclass(tmp_path: Path) -> None:
    name = module(tmp_path)
    message = error(f"{name}:NotAProcessor")
    assert "NotAProcessor does not subclass BatchEventProcessor" in message
    assert "class NotAProcessor(BatchEventProcessor)" in message


def test_abstract_processor(tmp_path: Path) -> None:
    name = module(tmp_path)
    assert "Unfinished does not implement on_next_batch" in error(f"{name}:Unfinished")


def test_unknown_option_shows_signature_and_suggestion(tmp_path: Path) -> None:
    name = module(tmp_path)
    message = error(f"{name}:Indexer", {"index": "i", "flush_evry": 5})
    assert "does not accept option(s) 'flush_evry'" in message
    assert (
        "its signature is Indexer(index: str, flush_every: int = 100, tags: list | None = None)\n" in message
    )
    assert "rename 'flush_evry' to 'flush_every'" in message


def test_missing_option(tmp_path: Path) -> None:
    name = module(tmp_path)
    message = error(f"{name}:Indexer")
    assert "needs option(s) 'index'" in message
    assert "index: ..." in message


def test_constructor_rejecting_a_value(tmp_path: Path) -> None:
    name = module(tmp_path)
    message = error(f"{name}:Indexer", {"index": "i", "flush_every": 0})
    assert "raised ValueError: flush_every must be at least 1" in message
    assert "processor.options" in message


def test_var_keyword_constructor_takes_anything(tmp_path: Path) -> None:
    name = module(tmp_path)
    assert load(f"{name}:Flexible", {"anything": 1}).settings == {"anything": 1}
