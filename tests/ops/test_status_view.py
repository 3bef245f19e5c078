"""The status page's data that needs no cluster: the hour of samples and the reuse of a read."""

from __future__ import annotations

from typing import Any

from jetkafka.ops._status_view import History, Reuse


def test_history_keeps_one_sample_per_interval_and_one_hour() -> None:
    history = History(span_s=3600, interval_s=2)
    assert [s["t"] for s in history.add({"t": 0.0})] == [0.0]
    assert [s["t"] for s in history.add({"t": 1.0})] == [0.0]  # too soon: not kept
    assert [s["t"] for s in history.add({"t": 2.0})] == [0.0, 2.0]
    kept = history.add({"t": 3601.0})
    assert [s["t"] for s in kept] == [2.0, 3601.0]  # older than an hour: dropped


def test_reuse_answers_from_the_last_read_until_it_is_old() -> None:
    built: list[int] = []

    def build() -> dict[str, Any]:
        built.append(1)
        return {"n": len(built)}

    reuse = Reuse(build, max_age_s=60)
    assert reuse.get() == {"n": 1}
    assert reuse.get() == {"n": 1}
    assert Reuse(build, max_age_s=0).get() == {"n": 2}
    assert len(built) == 2
