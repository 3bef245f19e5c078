"""``pip install jetkafka`` without extras: a real install of the core runs a real channel.

A fresh virtualenv gets the repository's jetkafka and its core dependencies from the package
index as pip is configured on this machine (nothing is copied from the test's own environment),
then consumes and commits records of the shared test cluster with a plain processor while
pyspark, pyarrow, requests, cloudevents, psutil and noida-db are absent.

The venv is made ``--without-pip`` and filled by this interpreter's pip (``pip --python``):
bootstrapping a pip into the venv (ensurepip) would add some 20 s for nothing tested here. pip's
cache keeps the install to 20-40 s after the first run. The sources are copied first, because
pip builds in the source tree and would leave ``build/`` and ``*.egg-info`` in the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.channels import channel_config, values, wait_until
from tests.support.processes import REPO

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RECORDS = 400
PARTITIONS = 4
# Import names of what the extras bring; none may be importable in a core install.
EXTRA_MODULES = ("pyspark", "pyarrow", "requests", "cloudevents", "psutil", "noida_db")

PROCESSOR = '''
import os

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource


class LineWriter(BatchEventProcessor):
    """Appends "partition offset value" per event; the batch is committed after the write."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        lines = "".join(f"{e.partition} {e.offset} {(e.value or b'').decode()}\\n" for e in events)
        os.write(self._fd, lines.encode())
        return BatchResponse.advance()

    def on_stop(self) -> None:
        os.close(self._fd)
'''


def venv_env() -> dict[str, str]:
    # PYTHONPATH (set when the suite runs from a work tree) would put the repository's
    # jetkafka in front of the installed one.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def install_core(root: Path) -> Path:
    """A venv under ``root`` holding ``pip install <repository>``; returns its python."""
    source = root / "source"
    source.mkdir()
    for name in ("setup.cfg", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "jetkafka", source / "jetkafka", ignore=shutil.ignore_patterns("__pycache__"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(source)],
        capture_output=True, text=True, timeout=240, env=venv_env(), check=False,
    )
    assert done.returncode == 0, f"pip install of the core failed:\n{done.stdout}\n{done.stderr}"
    return python


def run_in(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args], capture_output=True, text=True, timeout=60, cwd=str(cwd), env=venv_env(), check=False
    )


def test_a_core_install_consumes_and_commits_without_any_extra(
    tmp_path: Path, zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    python = install_core(tmp_path)
    work = tmp_path / "work"
    work.mkdir()

    where = run_in(python, "-c", "import jetkafka; print(jetkafka.__file__)", cwd=work)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout
    for module in EXTRA_MODULES:
        probe = run_in(python, "-c", f"import {module}", cwd=work)
        assert probe.returncode != 0 and f"No module named '{module}'" in probe.stderr, (module, probe.stderr)
    # One version: the installed distribution reports the package's own string.
    version = run_in(python, "-c", "import importlib.metadata as m, jetkafka; "
                     "print(m.version('jetkafka'), jetkafka.__version__)", cwd=work)
    distribution, package = version.stdout.split()
    assert distribution == package
    # What needs an extra says which.
    spark = run_in(python, "-c", "import jetkafka.spark", cwd=work)
    assert "fix: pip install 'jetkafka[spark]'" in spark.stderr
    jetkafka = str(python.parent / "jetkafka")
    assert run_in(Path(jetkafka), "--help", cwd=work).returncode == 0
    dev = run_in(Path(jetkafka), "dev", "up", cwd=work)
    assert dev.returncode == 2 and "fix: pip install 'jetkafka[devstack]'" in dev.stderr, dev.stderr

    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(RECORDS, PARTITIONS))
    out = work / "delivered.txt"
    (work / "line_writer.py").write_text(textwrap.dedent(PROCESSOR))
    config = channel_config(zk_connect, kafka_config, [topic])
    config["processor"] = {"class": "line_writer:LineWriter", "options": {"path": str(out)}}
    config_path = work / "channel.yaml"
    config_path.write_text(yaml.safe_dump(config))

    proc = subprocess.Popen(
        [jetkafka, "run", str(config_path), "--pythonpath", str(work)],
        cwd=str(work), env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        def all_delivered() -> bool:
            assert proc.poll() is None, f"jetkafka run exited {proc.returncode}"
            return out.exists() and len(out.read_text().splitlines()) >= RECORDS

        wait_until(all_delivered, timeout=60, what=f"{RECORDS} records delivered")
        status = subprocess.run(
            [jetkafka, "status", "--config", str(config_path), "--json"],
            capture_output=True, text=True, timeout=60, cwd=str(work), env=venv_env(), check=False,
        )
        assert status.returncode == 0, status.stderr
        assert len(json.loads(status.stdout)["instances"]) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output, output

    lines = [line.split() for line in out.read_text().splitlines()]
    assert sorted(int(value) for _, _, value in lines) == list(range(RECORDS)), "every record exactly once"
    for partition in range(PARTITIONS):
        offsets = [int(offset) for p, offset, _ in lines if int(p) == partition]
        assert offsets == list(range(RECORDS // PARTITIONS)), f"partition {partition} in order"

    shown = subprocess.run(
        [jetkafka, "offsets", "show", "--config", str(config_path), "--json"],
        capture_output=True, text=True, timeout=60, cwd=str(work), env=venv_env(), check=False,
    )
    assert shown.returncode == 0, shown.stderr
    committed = {p["partition"]: p["committed"] for p in json.loads(shown.stdout)["partitions"]}
    assert committed == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    # The same, read from ZooKeeper directly rather than through the installed jetkafka.
    for partition in range(PARTITIONS):
        assert zk.get(f"/consumers/g/offsets/{topic}/{partition}")[0] == str(RECORDS // PARTITIONS).encode()
