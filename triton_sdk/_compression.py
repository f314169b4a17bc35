"""Compressing request bodies and reading compressed answers (gzip, deflate).

Off by default: on a local network or loopback, compressing costs more CPU than the
bytes it saves. It pays across slow links, for compressible tensors.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Final, Literal, TypeAlias

from ._errors import InvalidInputError, unreadable

__all__ = ["Compression", "check_compression", "compress", "decompress"]

Compression: TypeAlias = Literal["gzip", "deflate"] | None
"""How request and response bodies are compressed: ``None`` (not at all), ``"gzip"``,
``"deflate"``."""

_CHOICES: Final = (None, "gzip", "deflate")
_LEVEL: Final = 1  # fast: the point is fewer bytes on a slow link, not the fewest


def check_compression(compression: object) -> Compression:
    if compression not in _CHOICES:
        raise InvalidInputError(
            f"compression must be None, 'gzip' or 'deflate', got {compression!r}"
        )
    return compression


def compress(body: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(body, compresslevel=_LEVEL)
    return zlib.compress(body, _LEVEL)


MOST_INFLATED: Final = 2**31
"""The largest answer body decompressed (2 GiB, the most Triton reads in a request): a
small compressed body may stand for gigabytes."""


def decompress(body: bytes, encoding: str | None, accepted: str | None) -> bytes:
    """The body of an answer sent with ``Content-Encoding: encoding`` (whose names are
    case-insensitive; ``x-gzip`` is gzip, RFC 9110 8.4.1), to a request that sent
    ``Accept-Encoding: accepted`` (None: identity alone). An encoding the request did not
    accept, a corrupt body and one that inflates past MOST_INFLATED raise InferenceError."""
    coding = (encoding or "").strip().lower()
    if not coding or coding == "identity":
        return body
    coding = "gzip" if coding == "x-gzip" else coding
    if coding not in ("gzip", "deflate") or not _accepts(accepted, coding):
        raise unreadable(
            f"the server answered with an encoding this client did not ask for: {encoding} "
            f"(Accept-Encoding: {accepted or 'identity'})"
        )
    if not body:  # (an empty answer says nothing, in any encoding)
        return body
    return _inflated(memoryview(body), coding, encoding)


def _inflated(body: memoryview, coding: str, encoding: str | None) -> bytes:
    """``body`` inflated, fed in pieces: a gzip body may hold many members one after
    another (RFC 1952), and the rest after each would be copied whole."""
    parts: list[bytes] = []
    size = 0
    position = 0
    pending = b""  # (input the last member left unread: the next member's start)
    inflater = zlib.decompressobj(31 if coding == "gzip" else 15)
    while True:
        if pending:
            piece, pending = pending, b""
        else:
            piece = bytes(body[position : position + _PIECE])
            position += len(piece)
        try:
            part = inflater.decompress(piece, MOST_INFLATED + 1 - size)
        except zlib.error as exc:
            raise unreadable(f"the server sent a {encoding} body that is corrupt: {exc}") from exc
        size += len(part)
        parts.append(part)
        if size > MOST_INFLATED:
            raise unreadable(
                f"the server sent a {encoding} body that inflates past {MOST_INFLATED} bytes "
                f"(from {len(body)})"
            )
        if inflater.eof:
            pending = inflater.unused_data
            following = pending or bytes(body[position : position + 1])
            if not following:
                return b"".join(parts)
            if coding != "gzip" or following[:1] != _GZIP_MAGIC[:1]:
                raise unreadable(
                    f"the server sent a {encoding} body that is corrupt: bytes follow its end"
                )
            inflater = zlib.decompressobj(31)  # (another member; not one: zlib says so)
        elif position >= len(body) and not pending:
            raise unreadable(f"the server sent a {encoding} body that is corrupt: it ends early")


_PIECE: Final = 1 << 16


_GZIP_MAGIC: Final = b"\x1f\x8b"


def _accepts(accepted: str | None, coding: str) -> bool:
    """Whether an ``Accept-Encoding`` value accepts ``coding``: named (``x-gzip`` is gzip),
    or else under ``*``, with a weight above 0 (RFC 9110 12.5.3)."""
    weights: dict[str, bool] = {}
    for item in (accepted or "").split(","):
        name, _, weight = item.partition(";")
        name = name.strip().lower()
        name = "gzip" if name == "x-gzip" else name
        weights[name] = _above_zero(weight)
    return weights.get(coding, weights.get("*", False))


def _above_zero(weight: str) -> bool:
    """Whether a coding's ``q=`` weight (none: 1) lets it be used."""
    quality = weight.strip().lower().removeprefix("q=").strip()
    try:
        return not quality or float(quality) > 0
    except ValueError:  # (a weight that is no number: the coding is named, so take it)
        return True
