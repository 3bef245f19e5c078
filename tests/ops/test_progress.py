"""The progress line of ``jetkafka run DIR``: one line for every channel of the process."""

from __future__ import annotations

from jetkafka.ops._progress import folder_progress_line


def test_the_line_counts_states_events_and_names_the_slowest() -> None:
    line = folder_progress_line(
        {"a": 100, "b": 50, "c": 10}, {"a": 700, "b": 50, "c": 5}, 60.0, {"failed": 1, "running": 3}
    )
    # c restarted (a hot deploy): its 5 events since are its progress, not -5.
    assert line == "progress: subscriptions 3 running, 1 failed; 605 events in 60 s (10.1/s); fewest events: b 0, c 5, a 600"


def test_one_channel_names_no_slowest_and_none_says_so() -> None:
    assert folder_progress_line({"a": 0}, {"a": 30}, 10.0, {"running": 1}) == (
        "progress: subscriptions 1 running; 30 events in 10 s (3.0/s)"
    )
    assert folder_progress_line({}, {}, 10.0, {}) == "progress: subscriptions none; 0 events in 10 s (0.0/s)"
