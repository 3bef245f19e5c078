"""Reading a channel's Prometheus endpoint the way Prometheus does."""

from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def value(samples: Samples, name: str, **labels: Any) -> float | None:
    """The one series of ``name`` with (at least) ``labels``; None when there is none."""
    wanted = {k: str(v) for k, v in labels.items()}
    found = [v for (n, ls), v in samples.items() if n == name and wanted.items() <= dict(ls).items()]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else None


def total(samples: Samples, name: str, **labels: Any) -> float:
    """The sum of every series of ``name`` with (at least) ``labels``."""
    wanted = {k: str(v) for k, v in labels.items()}
    return sum(v for (n, ls), v in samples.items() if n == name and wanted.items() <= dict(ls).items())
