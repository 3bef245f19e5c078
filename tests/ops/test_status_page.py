"""The status page in a real browser (headless Chromium, Debian's package): what it shows, and
that it shows every name as text.

Skipped with the reason when /usr/bin/chromium is missing (``apt-get install chromium``;
``.ci/run`` installs it when it can). With ``JETKAFKA_STATUS_SCREENSHOT=docs/status-page.png``
the group test also writes its screenshot there: that is how the one in docs/operations.md is made.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from jetkafka import InboundChannel
from jetkafka.devstack._ports import free_port
from jetkafka.ops._http import StatusServer, json_answer, page_route
from tests.support.channels import RecordingProcessor, channel_config, values, wait_until

CHROMIUM = Path("/usr/bin/chromium")
LAG_SECONDS = re.compile(r"\d+ (s|min)|\d+\.\d (h|d)")  # as the page writes lag in seconds
TWO_HOURS = re.compile(r"2\.\d h")
REPO = Path(__file__).resolve().parents[2]

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: install Debian's chromium package (apt-get install chromium)"
)


def chromium(url: str, *extra: str) -> str:
    """The page's DOM after its script ran (5 s of virtual time)."""
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [
                str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--virtual-time-budget=5000", *extra, "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


class Tables(HTMLParser):
    """The tables of a page by id: rows of ``{column: text}``; the page's title; every tag seen."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.tags: list[str] = []
        self.text: list[str] = []
        self.title = ""
        self._in_title = False
        self._table: str | None = None
        self._col: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_title = tag == "title"
        found = dict(attrs)
        if tag == "table":
            self._table = found.get("id") or ""
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append({})
        elif tag == "td":
            self._col = found.get("data-col")

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False
        if tag == "table":
            self._table = None
        elif tag == "td":
            self._col = None

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        self.text.append(data)
        if self._table is not None and self._col is not None:
            row = self.tables[self._table][-1]
            row[self._col] = row.get(self._col, "") + data

    def rows(self, table: str) -> list[dict[str, str]]:
        return [r for r in self.tables.get(table, []) if r]


# -- names as text -----------------------------------------------------------------------------

HOSTILE_GROUP = "<script>document.title='pwned'</script>g"
HOSTILE_TOPIC = "t\"><img src=x onerror=\"document.title='pwned'\">"
HOSTILE_CONSUMER = "c'1\" onmouseover=\"x"


def hostile_status() -> dict[str, Any]:
    partition = {
        "topic": HOSTILE_TOPIC, "partition": 0, "owner": HOSTILE_CONSUMER, "committed": 5, "low": 0, "high": 8,
        "lag": 3, "lag_seconds": None,
    }  # fmt: skip
    instance = {
        "id": HOSTILE_CONSUMER, "host": "<b>host</b>", "pid": 1, "started": 0, "since": "1970-01-01T00:00:00Z",
        "paused": False, "coordinator": "dynamic", "topics": [HOSTILE_TOPIC], "partitions": 1,
    }  # fmt: skip
    group = {
        "group": HOSTILE_GROUP, "topics": [HOSTILE_TOPIC], "instances": [instance], "partitions": [partition], "lag": 3,
        "paused_markers": [HOSTILE_CONSUMER], "recovery": [], "notes": {"lag_seconds": "n/a"},
        "recent": {"rebalances": None, "commits_refused": None, "note": "<i>note</i>"},
        "history": [{"t": 1000.0, "lag": {HOSTILE_TOPIC: 1}}, {"t": 1003.0, "lag": {HOSTILE_TOPIC: 3}}],
    }  # fmt: skip
    return {"view": "group", "generated": 1003.0, "groups": [group]}


@pytest.fixture
def hostile_server() -> Iterator[int]:
    server = StatusServer("127.0.0.1", 0, {"/": page_route, "/status.json": lambda: json_answer(200, hostile_status())})
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


@needs_chromium
def test_names_with_markup_and_quotes_show_as_written(hostile_server: int) -> None:
    page = Tables(chromium(f"http://127.0.0.1:{hostile_server}/"))
    text = "".join(page.text)
    assert HOSTILE_GROUP in text and HOSTILE_TOPIC in text and HOSTILE_CONSUMER in text
    assert page.rows("members")[0]["instance"] == HOSTILE_CONSUMER
    assert page.rows("members")[0]["host"] == "<b>host</b>"
    assert page.rows("partitions")[0]["topic"] == HOSTILE_TOPIC
    assert page.rows("partitions")[0]["owner"] == HOSTILE_CONSUMER
    # Nothing of the names became markup: no element they would have made, and no script ran.
    assert "img" not in page.tags and "b" not in page.tags and "i" not in page.tags
    assert page.tags.count("script") == 1  # the page's own
    assert page.title == "jetkafka status"  # the injected scripts would have changed it
    assert page.rows("members")[0]["paused"] == "no"
    assert f"paused: {HOSTILE_CONSUMER}" in text


def failing_status() -> dict[str, Any]:
    def partition(p: int, failure: dict[str, Any] | None) -> dict[str, Any]:
        return {"topic": "t", "partition": p, "owner": "c1", "committed": 300, "low": 0, "high": 310, "lag": 10,
                "lag_seconds": 5, "failure": failure}  # fmt: skip

    retrying = {"state": "retrying", "since": 880.0, "attempts": 6, "error": "ValueError: <b>bad</b> record",
                "offsets": [300, 309], "next_attempt": 1018.0, "reported_at": 999.0}  # fmt: skip
    halted = {"state": "halted", "since": 700.0, "attempts": 0, "error": "t[1]: offset 10 is out of range",
              "offsets": None, "next_attempt": None, "reported_at": 999.0}  # fmt: skip
    group = {
        "group": "g", "topics": ["t"], "instances": [], "partitions": [partition(0, retrying), partition(1, halted),
        partition(2, None)], "lag": 30, "paused_markers": [], "recovery": [], "notes": {}, "recent": {}, "history": [],
    }  # fmt: skip
    return {"view": "group", "generated": 1000.0, "groups": [group]}


@needs_chromium
def test_the_page_shows_the_partitions_that_do_not_move_on() -> None:
    server = StatusServer("127.0.0.1", 0, {"/": page_route, "/status.json": lambda: json_answer(200, failing_status())})
    server.start()
    try:
        page = Tables(chromium(f"http://127.0.0.1:{server.port}/"))
    finally:
        server.stop()
    assert [r["state"] for r in page.rows("partitions")] == ["retrying", "halted", "ok"]
    retrying, halted = page.rows("failing")
    assert (retrying["state"], retrying["attempts"], retrying["offsets"]) == ("retrying", "6", "300..309")
    assert retrying["since"] == "1970-01-01T00:14:40Z" and retrying["for"] == "2 min"
    assert retrying["next attempt"] == "in 18 s"
    assert retrying["last error"] == "ValueError: <b>bad</b> record"  # as text, not markup
    assert "b" not in page.tags
    assert (halted["state"], halted["next attempt"], halted["offsets"]) == ("halted", "after a reset", "-")


# -- against a running group -------------------------------------------------------------------


def jetkafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def shown(rows: list[dict[str, str]], column: str) -> list[str]:
    return [r[column].removesuffix(" (this)") for r in rows]


def assert_page_matches(page: Tables, status: dict[str, Any]) -> None:
    members = page.rows("members")
    assert sorted(shown(members, "instance")) == sorted(i["id"] for i in status["instances"])
    by_id = {r["instance"].removesuffix(" (this)"): r for r in members}
    for instance in status["instances"]:
        row = by_id[instance["id"]]
        assert (row["host"], row["pid"], row["partitions"]) == (instance["host"], str(instance["pid"]), str(instance["partitions"]))
        assert row["paused"] == ("yes" if instance["paused"] else "no")
    partitions = {(r["topic"], int(r["partition"])): r for r in page.rows("partitions")}
    assert sorted(partitions) == sorted((p["topic"], p["partition"]) for p in status["partitions"])
    for p in status["partitions"]:
        row = partitions[(p["topic"], p["partition"])]
        assert row["owner"] == (p["owner"] or "-")
        assert row["committed"] == ("-" if p["committed"] is None else str(p["committed"]))
        assert row["lag"] == ("-" if p["lag"] is None else str(p["lag"]))
        assert row["high"] == str(p["high"])


@needs_chromium
def test_the_page_shows_what_jetkafka_status_shows(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, values(30, 3))
    port = free_port()
    recorders = [RecordingProcessor(), RecordingProcessor()]
    data = [channel_config(zk_connect, kafka_config, [topic]) for _ in recorders]
    data[0]["metrics"] = {"port": port}
    channels = [InboundChannel.from_dict(d, processor=r) for d, r in zip(data, recorders, strict=True)]
    config = tmp_path / "group.yaml"
    config.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, [topic])))
    ui: subprocess.Popen[str] | None = None
    try:
        for channel in channels:
            channel.start()
        wait_until(lambda: sum(len(c.owned_partitions()) for c in channels) == 3, 60, "3 partitions owned")
        wait_until(lambda: sum(len(r.ids()) for r in recorders) >= 30, 60, "30 events processed")
        for channel in channels:
            channel.pause()  # nothing moves while the page and the command read
        wait_until(
            lambda: all(p["committed"] == 10 for p in json.loads(jetkafka("status", "--config", str(config), "--json").stdout)["partitions"]),
            60,
            "every offset committed",
        )
        # Records two hours old (their CreateTime): the next record of every partition.
        producer = Producer({**kafka_config, "linger.ms": 5})
        for i in range(30, 36):
            producer.produce(topic, value=str(i).encode(), partition=i % 3, timestamp=int((time.time() - 7200) * 1000))
        assert producer.flush(30) == 0
        run = jetkafka("status", "--config", str(config), "--json")
        assert run.returncode == 0, run.stderr
        status = json.loads(run.stdout)
        assert status["lag"] == 6

        # The instance's own page, on its metrics port.
        page = Tables(chromium(f"http://127.0.0.1:{port}/"))
        assert_page_matches(page, status)
        assert {r["paused"] for r in page.rows("partitions")} == {"yes"}
        assert channels[0].consumer_id + " (this)" in [r["instance"] for r in page.rows("members")]
        # Lag in seconds: the partitions of the other instance from the record at their committed
        # offset; its own from the gauge's clock (paused with nothing fetched: the time since
        # last seen caught up, or the record when the clock knows nothing yet).
        held = set(channels[0].owned_partitions())
        for row in page.rows("partitions"):
            if (row["topic"], int(row["partition"])) not in held:
                assert TWO_HOURS.fullmatch(row["lag s"]), row
            assert LAG_SECONDS.fullmatch(row["lag s"]), row

        # `jetkafka ui`, the whole group without a channel.
        ui_port = free_port()
        ui = subprocess.Popen(
            [sys.executable, "-m", "jetkafka", "ui", "--config", str(config), "--port", str(ui_port)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ},
        )  # fmt: skip
        assert ui.stdout is not None
        line = ui.stdout.readline()
        assert f"http://127.0.0.1:{ui_port}/" in line, line + (ui.stderr.read() if ui.poll() is not None and ui.stderr else "")
        page = Tables(chromium(f"http://127.0.0.1:{ui_port}/"))
        assert_page_matches(page, status)
        assert {r["paused"] for r in page.rows("partitions")} == {"yes"}
        text = "".join(page.text)
        assert "the whole group (jetkafka ui)" in text
        assert all(TWO_HOURS.fullmatch(r["lag s"]) for r in page.rows("partitions")), page.rows("partitions")
        assert f"lag s unknown for {topic}" not in text
        shot = tmp_path / "status-page.png"
        chromium(f"http://127.0.0.1:{ui_port}/", f"--screenshot={shot}", "--window-size=1280,900")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("JETKAFKA_STATUS_SCREENSHOT"):
            (REPO / os.environ["JETKAFKA_STATUS_SCREENSHOT"]).write_bytes(shot.read_bytes())
    finally:
        if ui is not None:
            ui.terminate()
            ui.wait(30)
        for channel in channels:
            channel.resume()
            channel.shutdown()
