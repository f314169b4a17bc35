"""Compressing request bodies and reading compressed answers (gzip, deflate).

Off by default: on a local network or loopback, compressing costs more CPU than the
bytes it saves. It pays across slow links, for compressible tensors.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Final, Literal, TypeAlias

from ._errors import InferenceError, InvalidInputError

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


def decompress(body: bytes, encoding: str | None) -> bytes:
    """The body of an answer sent with ``Content-Encoding: encoding`` (whose names are
    case-insensitive; ``x-gzip`` is gzip, RFC 9110 8.4.1)."""
    coding = (encoding or "").strip().lower()
    if not coding or coding == "identity":
        return body
    try:
        if coding in ("gzip", "x-gzip"):
            return gzip.decompress(body)
        if coding == "deflate":
            return zlib.decompress(body)
    except (OSError, EOFError, zlib.error) as exc:
        raise InferenceError(f"the server sent a {encoding} body that is corrupt: {exc}") from exc
    raise InferenceError(
        f"the server answered with an encoding this client did not ask for: {encoding}"
    )
