"""An HTTP answer cut off inside its head, from a server on a real loopback socket: the
request went out, so the error is a retryable connection error that may have run, on
both clients; never an answer read as finished."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import triton_sdk as ts

from ._both import resolve

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"


@contextmanager
def cutting(at: int) -> Iterator[str]:
    """A server that reads each request, sends the first ``at`` bytes of its answer's
    head and closes the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)  # (so that the loop sees stop)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(HEAD[:at])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("at", [17, 40, 64])  # (after the status; in a header; "Content-Length:")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_answer_cut_inside_its_head_is_a_lost_answer(mode: str, at: int) -> None:
    # The blocking client read the head as finished: "the server sent a body that is not
    # JSON" (not retryable, may_have_run=False), or a raw ValueError's words.
    with cutting(at) as url:

        async def run() -> None:
            kind = ts.Client if mode == "sync" else ts.AsyncClient
            client = kind(url, retry=None)
            try:
                with pytest.raises(ts.TritonConnectionError) as caught:
                    await resolve(client.server_metadata())
            finally:
                await resolve(client.close() if mode == "sync" else client.aclose())
            assert caught.value.retryable
            assert caught.value.may_have_run

        asyncio.run(run())
