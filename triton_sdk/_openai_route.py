"""Calls to an OpenAI-compatible server (Triton's OpenAI frontend): request bodies, and
its error bodies read into the SDK's errors. The I/O is in ``_transports/_openai.py``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from ._chat_template import Message
from ._errors import (
    MALFORMED_ANSWER,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    TritonError,
    classify_message,
    redirect_refused,
    unreadable_answer,
)
from ._llm import SamplingValue, with_max_tokens

__all__ = [
    "Route",
    "chat_body",
    "check_route",
    "completion_body",
    "error_from_body",
    "event_error",
    "include_usage",
    "reader",
]

Route = Literal["auto", "native", "openai"]
"""Where ``client.chat.completions.create`` goes: Triton's own endpoints (``"native"``),
the OpenAI-compatible frontend (``"openai"``), or the frontend for tool-calling requests
and the native endpoints otherwise (``"auto"``)."""

ROUTES = ("auto", "native", "openai")

T = TypeVar("T")


def check_route(route: str) -> Route:
    if route not in ROUTES:
        raise InvalidInputError(
            f"route must be one of {', '.join(map(repr, ROUTES))}, got {route!r}"
        )
    return route  # type: ignore[return-value]


def chat_body(
    model: str,
    messages: Sequence[Message],
    options: Mapping[str, SamplingValue],
    *,
    stream: bool,
    tools: Sequence[Mapping[str, Any]] | None,
    usage: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": _objects(messages, "messages", "message", model),
        **options,
    }
    if tools is not None:
        body["tools"] = _objects(tools, "tools", "tool", model)
    return _streaming(body, stream, usage)


def _objects(given: object, name: str, each: str, model: str) -> list[dict[str, Any]]:
    """``given``, a sequence of mappings (JSON objects), as a list of dicts."""
    if not isinstance(given, Sequence) or isinstance(given, (str, bytes)):
        raise InvalidInputError(
            f"{name} is a list of mappings, got {type(given).__name__}", model=model
        )
    objects = []
    for index, item in enumerate(given):
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                f"{each} {index} is a {type(item).__name__}, not a mapping", model=model
            )
        objects.append(dict(item))
    return objects


def completion_body(
    model: str,
    prompt: str,
    options: Mapping[str, SamplingValue],
    *,
    stream: bool,
    usage: bool = True,
) -> dict[str, Any]:
    if "max_completion_tokens" in options:  # (chat's name: completions read max_tokens)
        options = with_max_tokens(dict(options))
    return _streaming({"model": model, "prompt": prompt, **options}, stream, usage)


def _streaming(body: dict[str, Any], stream: bool, usage: bool) -> dict[str, Any]:
    body["stream"] = stream
    if stream and usage:  # usage on the last chunk, as the native route gives it
        body["stream_options"] = {"include_usage": True}
    return body


def include_usage(stream_options: Mapping[str, object] | None, stream: bool, model: str) -> bool:
    """Whether a stream ends with a usage chunk: OpenAI's ``stream_options``, where only
    ``include_usage`` has a meaning here; by default it does."""
    if stream_options is None:
        return True
    if not stream:
        raise InvalidInputError("stream_options applies to stream=True only", model=model)
    given: object = stream_options  # (annotations are not checked at run time)
    if not isinstance(given, Mapping) or set(given) - {"include_usage"}:
        raise InvalidInputError(
            f"stream_options takes include_usage only, got {given!r}", model=model
        )
    usage = given.get("include_usage", True)
    if not isinstance(usage, bool):
        raise InvalidInputError(f"include_usage is a bool, got {usage!r}", model=model)
    return usage


def _message(body: Any) -> str | None:
    """The message of an error body: FastAPI's ``{"detail": ...}`` or OpenAI's
    ``{"error": {"message": ...}}`` (or ``{"error": "..."}``)."""
    if not isinstance(body, Mapping):
        return None
    for key in ("error", "detail", "message"):
        value = body.get(key)
        if isinstance(value, Mapping):
            value = value.get("message") or value.get("msg") or json.dumps(value)
        if isinstance(value, list):  # FastAPI's validation errors
            value = "; ".join(
                str(item.get("msg", item)) if isinstance(item, Mapping) else str(item)
                for item in value
            )
        if value:
            return str(value)
    return None


def error_from_body(status: int, raw: bytes, url: str, model: str | None) -> TritonError:
    """The error for an HTTP error answer of the frontend."""
    try:
        message = _message(json.loads(raw))
    except (ValueError, RecursionError):
        message = None
    text = message or raw.decode("utf-8", "replace").strip() or f"HTTP {status}"
    if 300 <= status < 400:
        text = redirect_refused(status, message or raw.decode("utf-8", "replace").strip())
    text = f"{text} (from the OpenAI-compatible frontend at {url})"
    if status == 404:
        return ModelNotFoundError(text, status=status, model=model)
    error = classify_message(text, status=status, model=model)
    if type(error) is InferenceError and "unknown model" in text.lower():
        return ModelNotFoundError(text, status=status, model=model)
    return error


def event_error(event: Mapping[str, Any], model: str | None) -> TritonError | None:
    """The error an event of a stream carries (the answer was already 200), if any
    (``"error": null`` in a chunk is none)."""
    if event.get("error") is None and event.get("detail") is None:
        return None
    return classify_message(_message(event) or json.dumps(event), model=model)


def reader(parse: Callable[[Any], T], path: str, model: str) -> Callable[[Any], T]:
    """``parse`` (an answer type's ``from_openai_dict``), raising the InferenceError of
    an unreadable answer for JSON of another shape."""

    def read(answer: Any) -> T:
        try:
            return parse(answer)
        except MALFORMED_ANSWER as error:
            raise unreadable_answer(error, f"/{path}", model) from error

    return read
