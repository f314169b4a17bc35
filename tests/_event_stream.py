"""Stdlib stand-in servers' side of a server-sent event stream."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def open_event_stream(handler: BaseHTTPRequestHandler) -> None:
    """Read the request's body and start a chunked ``text/event-stream`` answer."""
    handler.rfile.read(int(handler.headers["Content-Length"]))
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def send_event(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """One event, ``data: ...``, in a chunk of its own."""
    event = b"data: " + data + b"\n\n"
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
    handler.wfile.flush()
