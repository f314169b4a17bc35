"""How a stream from a server without model configs (MLServer's ``infer_stream``) ends
when the server breaks it off, seen from a stdlib server on loopback that stands in for
MLServer: dropping the connection mid-stream (what MLServer does when the model fails) is
the model's failure, not a lost connection; a stream that stalls still times out, also
while bytes that end no event (keep-alive comments) keep arriving."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

import triton_sdk as ts

from .._event_stream import open_event_stream, send_event, send_json, send_keep_alive, serving

METADATA = {
    "name": "upper",
    "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
    "outputs": [{"name": "UPPER", "datatype": "BYTES", "shape": [-1]}],
}
EVENT = {
    "model_name": "upper",
    "outputs": [{"name": "UPPER", "datatype": "BYTES", "shape": [1], "data": ["AB"]}],
}


class MLServerLike(BaseHTTPRequestHandler):
    """Metadata, no config, and an infer_stream that sends one event and then, as the
    ``x-end`` header says, drops the connection (``cut``) or goes quiet (``stall``)."""

    protocol_version = "HTTP/1.1"

    def _json(self, status: int, body: object) -> None:
        send_json(self, status, body)

    def do_GET(self) -> None:
        if self.path == "/v2/models/upper":
            self._json(200, METADATA)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.headers["x-end"] == "keep-alive, unchunked":
            self._unchunked()
            return
        open_event_stream(self)
        send_event(self, json.dumps(EVENT).encode())
        if self.headers["x-end"] == "stall":
            time.sleep(2)
        if self.headers["x-end"] == "keep-alive" and not send_keep_alive(self):
            return  # the client left
        self.close_connection = True  # no closing chunk: the stream breaks off

    def _unchunked(self) -> None:
        """An answer that ends with the connection's close (no length, no chunks): one
        event, then keep-alive comments for 2 s."""
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"data: " + json.dumps(EVENT).encode() + b"\n\n")
        try:
            for _ in range(10):
                self.wfile.flush()
                time.sleep(0.2)
                self.wfile.write(b": keep-alive\n\n")
        except OSError:  # the client left
            return
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(MLServerLike) as served:
        yield served


def read(
    url: str, mode: str, end: str, received: list[object], arrived: list[float] | None = None
) -> None:
    """Stream from ``upper`` on a Client or (``mode="async"``) an AsyncClient; ``arrived``
    gets the time each response came."""
    if mode == "sync":
        with ts.Client(url) as client:
            model = client.model("upper")
            for result in model.stream(TEXT=["ab"], timeout=0.5, headers={"x-end": end}):
                received.append(result.as_strings("UPPER").tolist())
                if arrived is not None:
                    arrived.append(time.monotonic())
        return

    async def main() -> None:
        async with ts.AsyncClient(url) as client:
            model = await client.model("upper")
            async for result in model.stream(TEXT=["ab"], timeout=0.5, headers={"x-end": end}):
                received.append(result.as_strings("UPPER").tolist())
                if arrived is not None:
                    arrived.append(time.monotonic())

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_the_server_breaks_off_is_the_models_failure(url: str, mode: str) -> None:
    received: list[object] = []
    with pytest.raises(ts.TritonError) as caught:
        read(url, mode, "cut", received)
    assert received == [["AB"]]  # the response before the break
    assert type(caught.value) is ts.InferenceError  # not a TritonConnectionError
    assert "closed the stream before its end" in str(caught.value)
    assert not caught.value.retryable


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_that_stalls_still_times_out(url: str, mode: str) -> None:
    received: list[object] = []
    with pytest.raises(ts.TritonTimeoutError):
        read(url, mode, "stall", received)
    assert received == [["AB"]]


@pytest.mark.parametrize("end", ["keep-alive", "keep-alive, unchunked"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bytes_that_end_no_event_do_not_hold_off_the_timeout(url: str, mode: str, end: str) -> None:
    """The timeout bounds the wait for each response, not each read of the socket, also
    on an answer that ends with the connection's close (http.client lets go of its
    socket then)."""
    received: list[object] = []
    arrived: list[float] = []
    with pytest.raises(ts.TritonTimeoutError):
        read(url, mode, end, received, arrived)
    assert received == [["AB"]]
    assert time.monotonic() - arrived[0] < 1.8  # the comments went on for 2 s after it


def test_close_cuts_a_stream_that_ends_with_the_connections_close(url: str) -> None:
    received: list[object] = []
    with ts.Client(url) as client:
        model = client.model("upper")
        stream = model.stream(TEXT=["ab"], timeout=30, headers={"x-end": "keep-alive, unchunked"})
        received.append(next(stream).as_strings("UPPER").tolist())
        threading.Timer(0.3, client.close).start()
        started = time.monotonic()
        with pytest.raises(ts.TritonError, match="closed"):
            next(stream)
        assert time.monotonic() - started < 1.5  # not the end of the comments, 2 s on
    assert received == [["AB"]]
