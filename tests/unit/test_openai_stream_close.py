"""A streamed ``create()`` on the OpenAI route sends its request at once: closing the
stream before reading a chunk must still hang up, which cancels the request upstream.
A stdlib server on loopback stands in for the frontend and records the hang-up. Its
keep-alive comments must not hold off the stream's timeout."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

import triton_sdk as ts

from .._event_stream import (
    open_event_stream,
    send_chunk,
    send_event,
    send_keep_alive,
    serving,
)
from .._reader import StreamReader

MESSAGES = [{"role": "user", "content": "hi"}]
CHUNKS = 50  # 0.1 s apart: 5 s when nobody hangs up
LONG = "x" * 1_200_000  # past aiohttp's line limit (2 x its read buffer)


CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "delta": {"content": "t"}, "finish_reason": None}],
}


class Streaming(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hung_up: threading.Event

    def do_POST(self) -> None:
        open_event_stream(self)
        if self.path.endswith("/keep-alive/chat/completions"):
            self.keep_alive()
            return
        if self.path.endswith("/long/chat/completions"):
            self.long_line()
            return
        try:
            for _ in range(CHUNKS):
                send_event(self, json.dumps(CHUNK).encode())
                time.sleep(0.1)
        except OSError:
            type(self).hung_up.set()

    def long_line(self) -> None:
        """A chunk of 1.2 MB in one line, sent in pieces, then the end."""
        choice = {"index": 0, "delta": {"content": LONG}, "finish_reason": None}
        chunk = {**CHUNK, "choices": [choice]}
        event = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
        for start in range(0, len(event), 50_000):
            send_chunk(self, event[start : start + 50_000])
        self.wfile.write(b"0\r\n\r\n")

    def keep_alive(self) -> None:
        """One chunk, then only keep-alive comments for 2 s, then the end."""
        send_event(self, json.dumps(CHUNK).encode())
        if send_keep_alive(self):
            send_event(self, b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def frontend() -> Iterator[tuple[str, threading.Event]]:
    hung_up = threading.Event()
    handler = type("Handler", (Streaming,), {"hung_up": hung_up})
    with serving(handler) as served:
        yield f"{served}/v1", hung_up


def test_closing_an_unread_stream_hangs_up(frontend: tuple[str, threading.Event]) -> None:
    url, hung_up = frontend
    with (
        ts.Client("http://127.0.0.1:9", openai_url=url, route="openai") as client,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always", ResourceWarning)
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        stream.close()
        assert hung_up.wait(3), "the request still streams after close()"
        del stream
        gc.collect()
    # Closed by close(), not left to the garbage collector.
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_aclosing_an_unread_stream_hangs_up(frontend: tuple[str, threading.Event]) -> None:
    url, hung_up = frontend

    async def main() -> None:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=url, route="openai") as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            await stream.aclose()
            # While the stream is still referenced: hung up by aclose(), not by the collector.
            hung = await asyncio.to_thread(hung_up.wait, 3)
            assert hung, "the request still streams after aclose()"
            assert stream is not None

    asyncio.run(main())


def test_closing_a_stream_another_thread_reads_ends_its_loop(
    frontend: tuple[str, threading.Event],
) -> None:
    url, hung_up = frontend
    with ts.Client("http://127.0.0.1:9", openai_url=url, route="openai") as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        reader = StreamReader(stream)
        reader.wait_until_waiting()
        stream.close()
        reader.join(3)
        assert reader.outcome == ["ended"]
        assert len(reader.seen) < CHUNKS // 2
        assert hung_up.wait(3)


def test_aclosing_a_stream_another_task_reads_ends_its_loop(
    frontend: tuple[str, threading.Event],
) -> None:
    url, hung_up = frontend

    async def main() -> None:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=url, route="openai") as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            first = asyncio.Event()

            async def read() -> int:
                count = 0
                async for _ in stream:
                    count += 1
                    first.set()
                return count

            reader = asyncio.create_task(read())
            await asyncio.wait_for(first.wait(), 3)
            await asyncio.sleep(0.05)  # the reader is back waiting for the next chunk
            await stream.aclose()
            assert await asyncio.wait_for(reader, 3) < CHUNKS // 2

    asyncio.run(main())
    assert hung_up.wait(3)


class Ends(ts.CallHook):
    def __init__(self) -> None:
        self.ends = 0

    def on_end(self, op: Any, ctx: ts.CallContext) -> None:
        self.ends += 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_closing_an_unread_stream_ends_its_attempt_at_once(
    frontend: tuple[str, threading.Event], mode: str
) -> None:
    # The chunks were a generator not yet started: closing it ran nothing, and the
    # request stayed open (with its span) until the collector came.
    url, hung_up = frontend
    ends = Ends()
    if mode == "sync":
        with ts.Client("http://127.0.0.1:9", openai_url=url, route="openai", hooks=[ends]) as c:
            stream = c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            stream.close()
            assert ends.ends == 1
            assert stream is not None
    else:

        async def main() -> None:
            async with ts.AsyncClient(
                "http://127.0.0.1:9", openai_url=url, route="openai", hooks=[ends]
            ) as client:
                stream = await client.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True
                )
                await stream.aclose()
                assert ends.ends == 1
                assert stream is not None

        asyncio.run(main())
    assert hung_up.wait(3)


def read_chunks(
    url: str, mode: str, seen: list[object], arrived: list[float] | None = None
) -> None:
    """Read a chat stream with ``timeout=0.5`` on a Client or an AsyncClient; ``arrived``
    gets the time each chunk came."""
    if mode == "sync":
        with ts.Client("http://127.0.0.1:9", openai_url=url, route="openai") as client:
            for chunk in client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, timeout=0.5
            ):
                seen.append(chunk)
                if arrived is not None:
                    arrived.append(time.monotonic())
        return

    async def main() -> None:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=url, route="openai") as client:
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, timeout=0.5
            )
            async for chunk in stream:
                seen.append(chunk)
                if arrived is not None:
                    arrived.append(time.monotonic())

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_keep_alive_comments_do_not_hold_off_the_timeout(
    frontend: tuple[str, threading.Event], mode: str
) -> None:
    """The timeout bounds the wait for each chunk, not each read of the socket."""
    seen: list[object] = []
    arrived: list[float] = []
    with pytest.raises(ts.TritonTimeoutError):
        read_chunks(frontend[0] + "/keep-alive", mode, seen, arrived)
    assert len(seen) == 1
    assert time.monotonic() - arrived[0] < 1.8  # the comments went on for 2 s after it


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_chunk_longer_than_a_read_buffer_arrives_whole(
    frontend: tuple[str, threading.Event], mode: str
) -> None:
    # aiohttp's readline raised its own LineTooLong past twice its read buffer.
    seen: list[Any] = []
    read_chunks(frontend[0] + "/long", mode, seen)
    assert [chunk.text for chunk in seen] == [LONG]
