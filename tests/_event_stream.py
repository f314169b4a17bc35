"""Stdlib stand-in servers on loopback, and their side of a server-sent event stream."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server of ``handler`` on a free loopback port: its URL (``http://host:port``),
    until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
    """A whole JSON answer of ``status``."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def open_event_stream(handler: BaseHTTPRequestHandler) -> None:
    """Read the request's body and start a chunked ``text/event-stream`` answer."""
    handler.rfile.read(int(handler.headers["Content-Length"]))
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def send_event(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """One event, ``data: ...``, in a chunk of its own."""
    send_chunk(handler, b"data: " + data + b"\n\n")


def send_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """``data`` as one chunk of the answer."""
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


def send_keep_alive(handler: BaseHTTPRequestHandler, seconds: float = 2.0) -> bool:
    """Keep-alive comments (bytes that end no event), one every 0.2 s for ``seconds``;
    False when the client left meanwhile."""
    try:
        for _ in range(round(seconds / 0.2)):
            time.sleep(0.2)
            send_chunk(handler, b": keep-alive\n\n")
    except OSError:
        return False
    return True
