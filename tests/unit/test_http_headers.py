"""The blocking HTTP transport reads response heads with its own header parser."""

from __future__ import annotations

import http.client
import io

import pytest

from triton_sdk._transports._http_pool import _Response


class _Socket:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self.data))


def response_of(data: bytes) -> http.client.HTTPResponse:
    response = _Response(_Socket(data), method="POST")  # type: ignore[arg-type]
    response.begin()
    return response


def test_headers_compare_case_insensitively_and_the_body_is_read_by_length() -> None:
    response = response_of(
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: 3\r\n"
        b"Content-Length: 5\r\n"
        b"\r\n"
        b"{}abcdef"
    )
    assert response.status == 200
    assert response.getheader("inference-header-content-length") == "3"
    assert response.getheader("CONTENT-TYPE") == "application/octet-stream"
    assert response.getheader("Content-Encoding") is None
    assert response.read() == b"{}abc"
    assert not response.will_close


def test_repeated_and_folded_headers() -> None:
    response = response_of(
        b"HTTP/1.1 200 OK\r\nX-A: one\r\nX-A: two\r\nX-Long: first\r\n  second\r\n"
        b"no colon here\r\nContent-Length: 0\r\n\r\n"
    )
    assert response.getheader("x-a") == "one, two"
    assert response.getheader("x-long") == "first second"
    assert ("x-a", "two") in response.getheaders()


def test_chunked_bodies_and_connection_close() -> None:
    response = response_of(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    assert response.chunked
    assert response.will_close
    assert response.read() == b"abcde"


def test_a_body_without_length_ends_with_the_connection() -> None:
    response = response_of(b"HTTP/1.1 200 OK\r\n\r\nall of it")
    assert response.will_close
    assert response.read() == b"all of it"


def test_the_standard_librarys_limits_hold() -> None:
    too_many = b"".join(b"X-%d: v\r\n" % index for index in range(101))
    with pytest.raises(http.client.HTTPException, match="more than 100 headers"):
        response_of(b"HTTP/1.1 200 OK\r\n" + too_many + b"\r\n")
    with pytest.raises(http.client.LineTooLong):
        response_of(b"HTTP/1.1 200 OK\r\nX: " + b"v" * 70000 + b"\r\n\r\n")
    with pytest.raises(http.client.BadStatusLine):
        response_of(b"SPDY/3 200 OK\r\n\r\n")
