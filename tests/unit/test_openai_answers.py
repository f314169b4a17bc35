"""What the OpenAI route reads from the frontend's answers: streamed tool calls and log
probabilities kept, and an answer of another shape an InferenceError. A stdlib server on
loopback stands in for the frontend, with answers of OpenAI's shape (Triton's frontend
sends no log probabilities, and tool calls only with a parser; vLLM's and others do)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk.ops import OpenAIEvents, OpenAIPost

from .._event_stream import open_event_stream, send_chunk, send_event, serving

MESSAGES = [{"role": "user", "content": "What time is it?"}]
LOGPROBS = {"content": [{"token": "It", "logprob": -0.1, "bytes": [73, 116], "top_logprobs": []}]}
CALL_START = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "now", "arguments": ""},
}
CALL_REST = {"index": 0, "function": {"arguments": '{"zone": "UTC"}'}}


def chunk(**choice: Any) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": None, **choice}],
    }


TOOL_STREAM = [
    chunk(delta={"role": "assistant", "content": None, "tool_calls": [CALL_START]}),
    chunk(delta={"tool_calls": [CALL_REST]}, logprobs=LOGPROBS),
    chunk(delta={}, finish_reason="tool_calls"),
]
ANSWER = {
    "id": "a",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It is noon."},
            "finish_reason": "stop",
            "logprobs": LOGPROBS,
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
}
UNREADABLE = r"could not be read|not an object"
# Answers of 200 that are not of OpenAI's shape, by the model named in the request.
MALFORMED: dict[str, Any] = {
    "list": [ANSWER],
    "choices": {**ANSWER, "choices": {"index": 0}},
    "choice": {**ANSWER, "choices": ["It is noon."]},
    "message": {**ANSWER, "choices": [{"index": 0, "message": "It is noon."}]},
    "content": {**ANSWER, "choices": [{"index": 0, "message": {"content": 5}}]},
    "calls": {**ANSWER, "choices": [{"index": 0, "message": {"tool_calls": "now"}}]},
    "usage": {**ANSWER, "usage": [5, 4]},
}


class Frontend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if self.path.endswith("/terse/chat/completions"):
            # Valid server-sent events in other spellings than Triton's: no space after
            # "data:", one event over two data lines, "error": null; in 7-byte chunks.
            open_event_stream(self)
            first, second = (json.dumps({**event, "error": None}) for event in TOOL_STREAM[:2])
            cut = second.index(', "choices"')
            stream = (
                f"data:{first}\n\ndata: {second[:cut]}\ndata:{second[cut:]}\n\n"
                f"data:{json.dumps(TOOL_STREAM[2])}\r\n\r\ndata:[DONE]\n\n"
            ).encode()
            for start in range(0, len(stream), 7):
                send_chunk(self, stream[start : start + 7])
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.endswith("/stream/chat/completions"):
            open_event_stream(self)
            # (The client hangs up at the malformed event, before or after the end.)
            with contextlib.suppress(ConnectionError):
                for event in [*TOOL_STREAM, MALFORMED["choice"]]:
                    send_event(self, json.dumps(event).encode())
                send_event(self, b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps(MALFORMED.get(body["model"], ANSWER)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if body["model"] != "trickle":
            self.wfile.write(answer)
            return
        with contextlib.suppress(ConnectionError):  # (the client gives up: it hangs up)
            for index in range(len(answer)):  # one byte every 20 ms: seconds in all
                self.wfile.write(answer[index : index + 1])
                self.wfile.flush()
                time.sleep(0.02)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def frontend() -> Iterator[str]:
    with serving(Frontend) as served:
        yield f"{served}/v1"


def test_streamed_tool_calls_and_logprobs_are_kept(frontend: str) -> None:
    with ts.Client("http://127.0.0.1:9", openai_url=f"{frontend}/stream", route="openai") as c:
        stream = c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        first, second, last = (next(stream) for _ in range(3))
        # The fourth event is of another shape: an InferenceError, not an AttributeError.
        with pytest.raises(ts.InferenceError, match="could not be read"):
            next(stream)
    assert first.choices[0].delta.tool_calls == (CALL_START,)
    assert second.choices[0].delta.tool_calls == (CALL_REST,)
    assert second.choices[0].logprobs == LOGPROBS
    assert last.finish_reason == "tool_calls"
    for sent, got in zip(TOOL_STREAM, (first, second, last), strict=True):
        choice = sent["choices"][0]
        delta = {"content": None, **choice["delta"]}
        expected = {**sent, "choices": [{"logprobs": None, **choice, "delta": delta}]}
        assert got.to_openai_dict() == {**expected, "usage": None}


def test_events_in_every_spelling_of_server_sent_events_are_read(frontend: str) -> None:
    # "data:[DONE]" was read as JSON, an event over two data lines was refused, and a
    # chunk with "error": null was raised as an error.
    url = f"{frontend}/terse"
    with ts.Client("http://127.0.0.1:9", openai_url=url, route="openai") as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        chunks = list(stream)

    async def asynchronous() -> list[Any]:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=url, route="openai") as c:
            stream = await c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            return [chunk async for chunk in stream]

    for got in (chunks, asyncio.run(asynchronous())):
        assert [c.choices[0].delta.tool_calls for c in got[:2]] == [(CALL_START,), (CALL_REST,)]
        assert got[-1].finish_reason == "tool_calls"
        assert len(got) == 3


def test_an_answers_logprobs_are_kept(frontend: str) -> None:
    with ts.Client("http://127.0.0.1:9", openai_url=frontend, route="openai") as client:
        answer = client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True)
    assert answer.choices[0].logprobs == LOGPROBS
    assert answer.to_openai_dict() == ANSWER


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_an_answer_of_another_shape_is_an_inference_error(frontend: str, shape: str) -> None:
    with (
        ts.Client("http://127.0.0.1:9", openai_url=frontend, route="openai") as client,
        pytest.raises(ts.InferenceError, match=UNREADABLE),
    ):
        client.chat.completions.create(model=shape, messages=MESSAGES)

    async def asynchronous() -> None:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=frontend, route="openai") as c:
            with pytest.raises(ts.InferenceError, match=UNREADABLE):
                await c.chat.completions.create(model=shape, messages=MESSAGES)

    asyncio.run(asynchronous())


def test_an_answer_that_trickles_in_times_out_at_the_timeout(frontend: str) -> None:
    # The timeout bounded each read, so an answer sent a byte at a time took seconds.
    def call(client: Any) -> Any:
        return client.chat.completions.create(model="trickle", messages=MESSAGES, timeout=0.5)

    async def asynchronous() -> float:
        async with ts.AsyncClient("http://127.0.0.1:9", openai_url=frontend, route="openai") as c:
            started = time.monotonic()
            with pytest.raises(ts.TritonTimeoutError):
                await call(c)
            return time.monotonic() - started

    with ts.Client("grpc://127.0.0.1:9", openai_url=frontend, route="openai") as client:
        started = time.monotonic()
        with pytest.raises(ts.TritonTimeoutError):
            call(client)
        assert time.monotonic() - started < 1.5
    assert asyncio.run(asynchronous()) < 1.5


def test_a_post_is_encoded_once_as_strict_json_when_made() -> None:
    body = {"model": "m", "messages": MESSAGES, "temperature": 0.5}
    post = OpenAIPost("http://127.0.0.1:9/v1/chat/completions", body, "m")
    assert json.loads(post.payload) == body
    # NaN is no JSON a frontend reads: refused when the operation is made, not sent.
    with pytest.raises(ts.InvalidInputError, match="cannot be sent as JSON") as caught:
        OpenAIEvents(post.url, {**body, "temperature": float("nan")}, "m")
    assert caught.value.model == "m"
