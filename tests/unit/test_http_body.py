"""How the asyncio HTTP transport reads a large body, from a socket server that writes
the answer by hand (a whole body in pieces, and one cut short)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from triton_sdk._transports._http import _body

SIZE = 3 * 2**20 + 5  # large: read into one buffer


async def answered(
    pieces: list[bytes],
    length: int,
    read: Callable[[aiohttp.ClientResponse], Awaitable[object]],
    status: str = "200 OK",
) -> object:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {length}\r\n\r\n".encode())
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/") as response,
        ):
            return await read(response)
    finally:
        server.close()
        await server.wait_closed()


def test_a_large_body_arriving_in_pieces_is_read_whole_into_one_buffer() -> None:
    data = bytes(range(256)) * (SIZE // 256) + b"x" * (SIZE % 256)
    pieces = [data[start : start + 100_000] for start in range(0, SIZE, 100_000)]
    body = asyncio.run(answered(pieces, SIZE, _body))
    assert isinstance(body, bytearray)
    assert body == data


def test_a_small_body_is_read_as_aiohttp_reads_it() -> None:
    assert asyncio.run(answered([b"{}"], 2, _body)) == b"{}"


def test_a_large_body_cut_short_is_an_error_not_a_short_answer() -> None:
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(answered([b"\0" * (SIZE - 10)], SIZE, _body))


def test_an_answer_without_a_body_is_empty_whatever_its_content_length() -> None:
    assert asyncio.run(answered([], SIZE, _body, status="204 No Content")) == b""
