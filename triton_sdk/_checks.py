"""Checks of the arguments of public calls, made before anything is sent.

Every public entry point runs its arguments through these (directly, or through the
validators of the op it builds), so that a wrong type or value raises
:class:`InvalidInputError` naming the argument, the same way on every transport, and
never a foreign exception from deeper down.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeGuard, overload

import numpy as np

from ._errors import InvalidInputError

__all__ = [
    "NO_LIMIT_FROM",
    "check_header_size",
    "check_headers",
    "check_int",
    "check_model_name",
    "check_text",
    "check_timeout",
    "check_version",
    "numpy_number",
    "overlay_headers",
    "repeated",
    "shown",
]

NO_LIMIT_FROM: Final = 1e9
"""Timeouts of this many seconds (about 31 years) or more, ``inf`` included, mean no
limit: the transports' own clocks cannot hold them."""

MAX_MODEL_NAME_BYTES: Final = 1024
"""Model names are directory names in a repository; longer ones are refused before a
server closes the connection on a URL it will not read."""

# Names both HTTP and gRPC metadata carry: gRPC takes no other punctuation.
_HEADER_NAME: Final = re.compile(r"[0-9A-Za-z_.-]+")
# No tab: HTTP would carry one, gRPC metadata would not (grpc refuses the call). No space
# at either end: HTTP drops those, gRPC keeps them.
_HEADER_VALUE: Final = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?")
MAX_HEADER_BYTES: Final = 7168
"""The most a call's headers may take, counted as gRPC counts metadata: each header's name
and value and 32 bytes. Above 8 KiB in all (its own metadata takes about 500 bytes), gRPC
refuses calls at random, and Triton's HTTP endpoint closes the connection on a head of
more than 8 KiB."""
# Names the transports set themselves: a user's value would contradict the framing.
_RESERVED_HEADERS: Final = frozenset(
    {
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "host",
        "connection",
        "te",
        "upgrade",
        "inference-header-content-length",
    }
)


def _type_name(value: object) -> str:
    return type(value).__name__


@overload
def numpy_number(value: object, *, integer: Literal[True]) -> TypeGuard[np.integer[Any]]: ...
@overload
def numpy_number(
    value: object, *, integer: Literal[False]
) -> TypeGuard[np.integer[Any] | np.floating[Any]]: ...
def numpy_number(value: object, *, integer: bool) -> TypeGuard[np.integer[Any] | np.floating[Any]]:
    """Whether ``value`` is a numpy integer (or, unless ``integer``, float) scalar: a
    number computed with numpy, taken as its value. ``np.timedelta64`` is a numpy integer
    too, but it counts some unit, not plain numbers: it is not one."""
    if isinstance(value, np.timedelta64):
        return False
    return isinstance(value, np.integer if integer else np.integer | np.floating)


def repeated(names: list[str]) -> list[str]:
    """The names that come more than once in ``names``, sorted."""
    return sorted({name for name in names if names.count(name) > 1})


def shown(value: object) -> str:
    """``repr(value)``, a numpy scalar as the Python value it holds (numpy 2 writes
    ``np.float64(1.5)``, numpy 1 ``1.5``)."""
    if isinstance(value, np.timedelta64):  # (it says its unit only as itself)
        return repr(value)
    return repr(value.item() if isinstance(value, np.number | np.bool_) else value)


def check_timeout(timeout: object, what: str = "timeout") -> float | None:
    """Seconds > 0, or None for no limit (as is ``inf`` and anything from 1e9 s on)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        if not numpy_number(timeout, integer=False):
            raise InvalidInputError(
                f"{what} must be a number of seconds or None, got {_type_name(timeout)}"
            )
        timeout = float(timeout)  # np.float32(2.5), np.int64(3)
    # (compared before any float(): an int past float's range is "no limit" too)
    if not timeout > 0 or (isinstance(timeout, float) and math.isnan(timeout)):
        raise InvalidInputError(f"{what} must be > 0 or None, got {shown(timeout)}")
    return None if timeout >= NO_LIMIT_FROM else float(timeout)


def check_int(value: object, what: str, minimum: int, maximum: int | None = None) -> int:
    """An int (not a bool; a numpy integer is taken as its value) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        if not numpy_number(value, integer=True):
            raise InvalidInputError(f"{what} must be an int, got {_type_name(value)}")
        value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise InvalidInputError(f"{what} must be >= {minimum}{upper}, got {value}")
    return value


def check_text(value: object, what: str) -> str:
    """A str that can travel as UTF-8 (no lone surrogates) and reach the server whole:
    no NUL character, at which the server's C strings would cut it (a model name with one
    reached another model over gRPC)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str, got {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} is not valid text: it has a lone surrogate, which UTF-8 cannot carry"
        ) from None
    if "\x00" in value:
        raise InvalidInputError(
            f"{what} has a NUL character ('\\x00'), at which the server would cut it"
        )
    return value


def check_model_name(name: object, what: str = "model name") -> str:
    """A non-empty model name that fits a repository (at most 1024 bytes of UTF-8)."""
    text = check_text(name, what)
    if not text:
        raise InvalidInputError(f"{what} must not be empty")
    if text in (".", ".."):
        # (no repository folder has that name; in an HTTP path, the URL would reach
        # another endpoint: /v2/models/../trace/setting is the server-wide settings)
        raise InvalidInputError(f"{what} {text!r} names no model: it is a path step")
    if len(text.encode("utf-8")) > MAX_MODEL_NAME_BYTES:
        raise InvalidInputError(
            f"{what} is {len(text.encode('utf-8'))} bytes long; model names are at most "
            f"{MAX_MODEL_NAME_BYTES} bytes"
        )
    return text


def check_version(version: object) -> str | None:
    """A model version: None (the server's policy picks) or a non-empty str of digits."""
    if version is None or version == "":
        return None
    text = check_text(version, "version")
    # (isdigit alone takes "²" and other scripts' digits; the server reads 64-bit ints)
    digits = text.isascii() and text.isdigit()
    # (length first: int() refuses more than 4300 digits with a raw ValueError)
    if not digits or len(text.lstrip("0")) > 19 or int(text) > _LARGEST_VERSION:
        raise InvalidInputError(
            f"version must be a str of digits such as '1' (at most {_LARGEST_VERSION}), "
            f"got {text!r}"
        )
    return text


_LARGEST_VERSION: Final = 2**63 - 1


def check_headers(headers: object) -> dict[str, str]:
    """Headers both protocols can carry: a mapping of token names to printable ASCII.

    Names compare case-insensitively, as HTTP's do: of names that differ only in case,
    the last one given is kept (one header is sent, never both).
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidInputError(
            f"headers must be a mapping of str to str, got {_type_name(headers)}"
        )
    checked: dict[str, str] = {}
    spelt: dict[str, str] = {}  # lower-case name -> the name as given
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise InvalidInputError(
                f"invalid header name {name!r}: letters, digits, '-', '_' and '.' only"
            )
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("grpc-") or lowered.endswith("-bin"):
            raise InvalidInputError(
                f"header {name!r} is set by the transport (or is binary gRPC metadata); "
                "it cannot be given"
            )
        given: Any = value
        if not isinstance(given, str) or not _HEADER_VALUE.fullmatch(given):
            # The value is not shown: headers often carry credentials.
            raise InvalidInputError(
                f"header {name!r}: values must be printable ASCII, without line breaks "
                "or spaces at either end (HTTP drops those, gRPC keeps them)"
            )
        previous = spelt.get(lowered)
        if previous is not None:
            del checked[previous]
        spelt[lowered] = name
        checked[name] = given
    return check_header_size(checked)


def check_header_size(headers: dict[str, str]) -> dict[str, str]:
    """``headers``, refused when they take more than MAX_HEADER_BYTES."""
    size = sum(len(name) + len(value) + 32 for name, value in headers.items())
    if size > MAX_HEADER_BYTES:
        largest = max(headers, key=lambda name: len(headers[name]))
        raise InvalidInputError(
            f"headers take {size} bytes (32 per header, as gRPC counts them), more than "
            f"the {MAX_HEADER_BYTES} servers take without refusing calls; the largest is "
            f"{largest!r}"
        )
    return headers


def overlay_headers(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``extra`` on top; names compare case-insensitively (as HTTP's do),
    so one header per name is sent."""
    replaced = {name.lower() for name in extra}
    merged = {name: value for name, value in base.items() if name.lower() not in replaced}
    merged.update(extra)
    return merged
