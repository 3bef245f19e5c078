"""A ``jetkafka bench`` run in a process of its own, as a user starts it; its JSON document."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.processes import REPO


def bench_json(*args: str, timeout: float) -> dict[str, Any]:
    """``jetkafka bench ARGS --json --no-progress``; fails the test with its stderr's tail if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "jetkafka", "bench", *args, "--json", "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
