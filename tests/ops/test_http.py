"""The HTTP server of the metrics port and of `jetkafka ui`: routes, codes, JSON bodies, read-only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from jetkafka.ops._http import StatusServer, json_answer, page_route
from jetkafka.ops._metrics_endpoint import MetricsEndpoint


def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def endpoint() -> Iterator[MetricsEndpoint]:
    served = MetricsEndpoint("127.0.0.1", 0, "test.yaml")
    try:
        yield served
    finally:
        served.close()


def test_metrics_are_served_as_prometheus_text(endpoint: MetricsEndpoint) -> None:
    status, headers, body = get(endpoint.port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert b"# HELP" in body or body == b""


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_without_a_channel_answer_503_with_the_reason(endpoint: MetricsEndpoint, path: str) -> None:
    status, headers, body = get(endpoint.port, path)
    assert status == 503
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(body)["reason"] == "no channel is attached to this endpoint"


@pytest.mark.parametrize("path", ["/nope", "/metrics/", "/healthz/x", "/status", "/index.html"])
def test_any_other_path_is_404_naming_the_served_ones(endpoint: MetricsEndpoint, path: str) -> None:
    status, _, body = get(endpoint.port, path)
    assert status == 404
    answer = json.loads(body)
    assert answer["error"] == f"no such path: {path}"
    assert answer["paths"] == [
        "/",
        "/debug/memory",
        "/debug/profile",
        "/debug/threads",
        "/healthz",
        "/metrics",
        "/readyz",
        "/status.json",
    ]


def test_a_query_string_does_not_change_the_route(endpoint: MetricsEndpoint) -> None:
    assert get(endpoint.port, "/healthz?verbose=1")[0] == 503


def test_the_page_and_its_data_are_served(endpoint: MetricsEndpoint) -> None:
    status, headers, body = get(endpoint.port, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"status.json" in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    status, _, body = get(endpoint.port, "/status.json")
    assert status == 200
    assert json.loads(body)["groups"] == []


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_nothing_but_get_and_head_is_served(endpoint: MetricsEndpoint, method: str) -> None:
    status, headers, body = get(endpoint.port, "/", method)
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert "read-only" in json.loads(body)["error"]


def test_head_answers_without_a_body(endpoint: MetricsEndpoint) -> None:
    status, headers, body = get(endpoint.port, "/healthz", "HEAD")
    assert status == 503 and body == b"" and int(headers["Content-Length"]) > 0


def test_a_failing_route_answers_500_and_the_server_goes_on() -> None:
    def broken() -> Any:
        raise RuntimeError("boom")

    server = StatusServer("127.0.0.1", 0, {"/broken": broken, "/ok": lambda: json_answer(200, {"ok": True})})
    server.start()
    try:
        status, _, body = get(server.port, "/broken")
        assert status == 500 and json.loads(body) == {"error": "RuntimeError: boom"}
        assert get(server.port, "/ok")[0] == 200
    finally:
        server.stop()


def test_the_page_puts_data_in_as_text_never_as_markup() -> None:
    # The browser test shows it in Chromium; this keeps the source honest where no browser runs.
    page = page_route()[2].decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in page
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_a_query_route_is_given_the_parameters_and_a_plain_route_ignores_them() -> None:
    seen: list[dict[str, str]] = []

    def echo(query: Any) -> Any:
        seen.append(dict(query))
        return json_answer(200, dict(query))

    server = StatusServer("127.0.0.1", 0, {"/plain": lambda: json_answer(200, {"plain": True})}, {"/echo": echo})
    server.start()
    try:
        status, _, body = get(server.port, "/echo?seconds=5&mode=wall&seconds=7&empty=")
        assert status == 200 and json.loads(body) == {"seconds": "7", "mode": "wall", "empty": ""}
        assert get(server.port, "/echo")[0] == 200 and seen[-1] == {}
        assert json.loads(get(server.port, "/plain?x=1")[2]) == {"plain": True}
        assert json.loads(get(server.port, "/nope")[2])["paths"] == ["/echo", "/plain"]
    finally:
        server.stop()
