"""An HTTP redirect is refused on every HTTP path of both clients, never followed: following
one sends the request, its body and its headers (credentials) to another host. Checked
with a stand-in that redirects to a second one that records what reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

import triton_sdk as ts

from .._event_stream import send_json, serving
from ._both import resolve

MESSAGES = [{"role": "user", "content": "x"}]


class Elsewhere(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    reached: ClassVar[list[tuple[str, dict[str, str]]]] = []
    """Each request that got here: its path and headers."""

    def answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reached.append((self.path, dict(self.headers.items())))
        send_json(self, 200, {"name": "elsewhere", "version": "0", "extensions": []})

    do_GET = do_POST = answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def redirecting(status: int, target: str) -> type[BaseHTTPRequestHandler]:
    class Redirect(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Redirect


@contextmanager
def redirected(status: int) -> Iterator[str]:
    """The URL of a server that redirects every request to :class:`Elsewhere`."""
    Elsewhere.reached.clear()
    with serving(Elsewhere) as elsewhere, serving(redirecting(status, elsewhere)) as url:
        yield url


CALLS: dict[str, Callable[[Any], Any]] = {
    "server_metadata": lambda client: client.server_metadata(),
    "load_model": lambda client: client.load_model("m", config={"max_batch_size": 0}),
    "metrics": lambda client: client.metrics(),
    "chat": lambda client: client.chat.completions.create(
        model="m", messages=MESSAGES, route="openai"
    ),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_redirect_is_refused_and_nothing_reaches_the_other_host(mode: str, call: str) -> None:
    # The asyncio client followed it (aiohttp's default), sending the body (a 307 keeps
    # the POST) and every header but Authorization to the other host, and returned that
    # host's answer.
    status = 307
    with redirected(status) as url:

        async def run() -> None:
            kind = ts.Client if mode == "sync" else ts.AsyncClient
            client = kind(
                url,
                headers={"x-api-key": "secret"},
                metrics_url=f"{url}/metrics",
                openai_url=f"{url}/v1",
                retry=None,
            )
            try:
                with pytest.raises(ts.TritonError, match=f"HTTP {status}: a redirect") as caught:
                    await resolve(CALLS[call](client))
                assert caught.value.status == status
            finally:
                await resolve(client.close() if mode == "sync" else client.aclose())

        asyncio.run(run())
    assert Elsewhere.reached == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_over_many_endpoints_the_error_names_the_endpoint(mode: str) -> None:
    # "give the client the URL of the server itself" did not say which of its URLs.
    with redirected(307) as url, serving(Elsewhere) as other:

        async def run() -> None:
            kind = ts.Client if mode == "sync" else ts.AsyncClient
            client = kind([url, other], retry=None)
            try:
                for _ in range(100):  # (ties are broken at random: it comes up soon)
                    try:
                        await resolve(client.server_metadata())
                    except ts.TritonError as error:
                        assert str(error).endswith(f"(endpoint {url})"), error  # noqa: PT017
                        return
                pytest.fail("the redirecting endpoint was never picked")
            finally:
                await resolve(client.close() if mode == "sync" else client.aclose())

        asyncio.run(run())
