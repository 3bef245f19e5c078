"""The /debug/ paths over HTTP: off unless enabled (asked at each request), 400, 409, the answers."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from jetkafka.ops._http import StatusServer
from jetkafka.ops._metrics_endpoint import MetricsEndpoint
from jetkafka.profiling._routes import DebugRoutes


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


class Switch:
    def __init__(self) -> None:
        self.on = True

    def __call__(self) -> bool:
        return self.on


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[int, Switch]]:
    """One server for the module (stopping one takes half a second), its switch on at each test's start."""
    switch = Switch()
    routes = DebugRoutes(switch)
    server = StatusServer("127.0.0.1", 0, {}, routes.routes())
    server.start()
    try:
        yield server.port, switch
    finally:
        routes.close()
        server.stop()


@pytest.fixture
def switch(served: tuple[int, Switch]) -> Switch:
    served[1].on = True
    return served[1]


@pytest.fixture
def port(served: tuple[int, Switch], switch: Switch) -> int:
    return served[0]


@pytest.mark.parametrize("path", ["/debug/threads", "/debug/profile?seconds=1", "/debug/memory"])
def test_off_is_404_naming_the_key_and_is_asked_at_each_request(port: int, switch: Switch, path: str) -> None:
    switch.on = False
    status, content_type, body = get(port, path)
    assert status == 404 and content_type.startswith("application/json")
    assert "set metrics.debug: true" in json.loads(body)["error"]
    switch.on = True
    assert get(port, "/debug/threads")[0] == 200


@pytest.mark.parametrize(
    ("query", "named"),
    [("", "seconds"), ("seconds=0.01", "seconds"), ("seconds=301", "seconds"), ("seconds=abc", "seconds"),
     ("seconds=nan", "seconds"), ("seconds=1&hz=0", "hz"), ("seconds=1&mode=idle", "mode"),
     ("seconds=1&format=svg", "format")],
)
def test_a_bad_profile_request_is_400_naming_the_parameter(port: int, query: str, named: str) -> None:
    started = time.monotonic()
    status, _, body = get(port, f"/debug/profile?{query}")
    assert status == 400
    assert named in json.loads(body)["error"]
    assert time.monotonic() - started < 1  # refused, not sampled


def test_a_second_profile_while_one_runs_is_409_naming_its_end(port: int) -> None:
    first: list[tuple[int, str, bytes]] = []
    runner = threading.Thread(target=lambda: first.append(get(port, "/debug/profile?seconds=1.5&hz=20")))
    runner.start()
    deadline = time.monotonic() + 5
    while not any(t.name == "jetkafka-profiler" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    status, _, body = get(port, "/debug/profile?seconds=1")
    runner.join(10)
    assert status == 409
    answer = json.loads(body)
    assert "already running" in answer["error"] and answer["ends_at"] > time.time() - 5
    assert first[0][0] == 200
    assert json.loads(first[0][2])["profiles"] is not None
    assert get(port, "/debug/profile?seconds=0.1&format=collapsed")[0] == 200  # free again


def test_the_thread_dump_lists_every_thread_with_its_stack(port: int) -> None:
    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait, name="dump-waiter", daemon=True)
    waiter.start()
    try:
        status, content_type, body = get(port, "/debug/threads")
    finally:
        stop.set()
    text = body.decode()
    assert status == 200 and content_type.startswith("text/plain")
    assert f'"dump-waiter" ident {waiter.ident}, native id {waiter.native_id}, daemon true, cpu ' in text
    assert '"MainThread"' in text and "jetkafka-http" in text
    assert 'in wait\n' in text.split('"dump-waiter"', 1)[1]


def test_memory_says_how_to_trace_or_shows_the_top_allocations(port: int) -> None:
    assert not tracemalloc.is_tracing()
    status, _, body = get(port, "/debug/memory")
    assert status == 200 and b"PYTHONTRACEMALLOC=25 jetkafka run" in body
    tracemalloc.start(5)
    try:
        kept = [bytearray(4096) for _ in range(2000)]  # about 8 MiB from one line
        status, _, body = get(port, "/debug/memory?limit=3&group=lineno")
        assert len(kept) == 2000
    finally:
        tracemalloc.stop()
    text = body.decode()
    assert status == 200 and text.startswith("traced Python memory:")
    assert "#1: " in text and "test_routes.py:" in text.split("#2")[0]
    assert get(port, "/debug/memory?limit=0")[0] == 400
    assert get(port, "/debug/memory?group=module")[0] == 400


def test_the_metrics_endpoint_serves_them_only_with_a_channel_that_has_debug_on() -> None:
    endpoint = MetricsEndpoint("127.0.0.1", 0, "test.yaml")
    try:
        assert not endpoint.debug_enabled()  # no channel attached
        status, _, body = get(endpoint.port, "/debug/threads")
        assert status == 404 and "metrics.debug" in json.loads(body)["error"]
    finally:
        endpoint.close()
