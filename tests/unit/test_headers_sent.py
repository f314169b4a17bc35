"""The headers the HTTP transports send when a caller gives one of a name they set
themselves (``Accept``, ``Accept-Encoding``), in another case: one header per name, the
caller's. Checked on a stand-in that records each request: this is about the client."""

from __future__ import annotations

import asyncio
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

import triton_sdk as ts

from .._event_stream import send_json, serving
from ._both import resolve

CHAT = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}
METADATA = {"name": "triton", "version": "2.51.0", "extensions": []}


class Recording(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[list[tuple[str, str]]]] = []
    """Per request: its Accept and Accept-Encoding headers, names in lower case."""

    def answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        wanted = ("accept", "accept-encoding")
        self.seen.append([(k.lower(), v) for k, v in self.headers.items() if k.lower() in wanted])
        send_json(self, 200, CHAT if self.path.endswith("/chat/completions") else METADATA)

    do_GET = do_POST = answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def sent(mode: str, call: Any, **options: Any) -> list[tuple[str, str]]:
    """The headers the one request of ``call(client)`` carried."""
    Recording.seen.clear()
    with serving(Recording) as url:

        async def run() -> None:
            kind = ts.Client if mode == "sync" else ts.AsyncClient
            client = kind(url, openai_url=f"{url}/v1", **options)
            try:
                await resolve(call(client))
            finally:
                await resolve(client.close() if mode == "sync" else client.aclose())

        asyncio.run(run())
    (headers,) = Recording.seen
    return headers


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_callers_accept_encoding_replaces_the_compressions(mode: str) -> None:
    # The blocking client sent both ("identity" and "gzip"); the asyncio one dropped the
    # caller's without a word.
    headers = sent(
        mode,
        lambda client: client.server_metadata(headers={"accept-encoding": "identity"}),
        compression="gzip",
    )
    assert [value for name, value in headers if name == "accept-encoding"] == ["identity"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_callers_accept_replaces_the_openai_routes(mode: str) -> None:
    messages = [{"role": "user", "content": "x"}]
    headers = sent(
        mode,
        lambda client: client.chat.completions.create(
            model="m", messages=messages, route="openai", headers={"accept": "text/plain"}
        ),
    )
    assert [value for name, value in headers if name == "accept"] == ["text/plain"]
