"""Results of chat and completion calls, shaped like OpenAI's (without depending on it).

Each type has ``to_openai_dict()``, the JSON OpenAI's API would send (it validates as the
``openai`` package's type of the same name), and ``from_openai_dict()`` for answers from an
OpenAI-compatible server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from ._display import Displayable, Table

__all__ = [
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatMessage",
    "ChoiceDelta",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionChunk",
    "Usage",
]

OpenAIDict = dict[str, Any]
"""JSON as OpenAI's API writes it."""

OpenAIObject = Mapping[str, Any]
"""A JSON object of OpenAI's API kept as the server sent it (a tool call, log
probabilities)."""


def _object(data: object, what: str) -> Mapping[str, Any]:
    """``data`` if it is a JSON object (None: an empty one), else a TypeError naming it."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise TypeError(f"{what} is not a JSON object: {data!r:.80}")
    return data


def _objects(data: object, what: str) -> tuple[OpenAIObject, ...] | None:
    """``data``, a JSON list of objects, as a tuple (None or empty: None)."""
    if not data:
        return None
    if not isinstance(data, list) or not all(isinstance(item, Mapping) for item in data):
        raise TypeError(f"{what} is not a list of JSON objects: {data!r:.80}")
    return tuple(data)


def _text(data: object, what: str) -> str | None:
    if data is not None and not isinstance(data, str):
        raise TypeError(f"{what} is not a string: {data!r:.80}")
    return data


@attrs.frozen
class Usage:
    """Token counts of one call, as the model reported them."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any] | None) -> Usage | None:
        """From an OpenAI-compatible server's JSON (None when it sent none)."""
        if data is None:
            return None
        data = _object(data, "usage")
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


@attrs.frozen
class ChatMessage:
    """The assistant's message of one choice."""

    content: str | None
    role: str = "assistant"
    tool_calls: tuple[OpenAIObject, ...] | None = None

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        data: OpenAIDict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [dict(call) for call in self.tool_calls]
        return data


@attrs.frozen
class ChatChoice:
    """One generated answer: ``finish_reason`` is ``"stop"`` (the model ended it or a stop
    string did), ``"length"`` (``max_tokens`` ran out) or what the server said."""

    index: int
    message: ChatMessage
    finish_reason: str | None
    logprobs: OpenAIObject | None = None
    """The log probabilities the server sent (asked for with ``logprobs=True``), as sent."""

    @property
    def text(self) -> str | None:
        """The choice's text (None when it has none, e.g. only tool calls)."""
        return self.message.content

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        return {
            "index": self.index,
            "message": self.message.to_openai_dict(),
            "finish_reason": self.finish_reason,
            "logprobs": _logprobs_dict(self.logprobs),
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any], index: int) -> ChatChoice:
        """From an OpenAI-compatible server's JSON; ``index`` where it gave none."""
        data = _object(data, "a choice")
        message = _object(data.get("message"), "a choice's message")
        return cls(
            int(data.get("index", index)),
            ChatMessage(
                _text(message.get("content"), "a message's content"),
                str(message.get("role") or "assistant"),
                _objects(message.get("tool_calls"), "a message's tool_calls"),
            ),
            _text(data.get("finish_reason"), "a choice's finish_reason"),
            _logprobs(data),
        )


@attrs.frozen
class ChoiceDelta:
    """What one chunk adds to a choice: the role (first chunk only), new text, and the
    pieces of tool calls (OpenAI's ``delta.tool_calls``, as the server sent them: each
    names the ``index`` of the call it adds to)."""

    content: str | None = None
    role: str | None = None
    tool_calls: tuple[OpenAIObject, ...] | None = None

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        data: OpenAIDict = {"content": self.content}
        if self.role is not None:
            data["role"] = self.role
        if self.tool_calls:
            data["tool_calls"] = [dict(call) for call in self.tool_calls]
        return data


@attrs.frozen
class ChunkChoice:
    """One choice's part of a streamed chat chunk."""

    index: int
    delta: ChoiceDelta
    finish_reason: str | None = None
    logprobs: OpenAIObject | None = None
    """The log probabilities of this chunk's tokens, as the server sent them."""

    @property
    def text(self) -> str | None:
        """The choice's text (None when it has none, e.g. only tool calls)."""
        return self.delta.content

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        return {
            "index": self.index,
            "delta": self.delta.to_openai_dict(),
            "finish_reason": self.finish_reason,
            "logprobs": _logprobs_dict(self.logprobs),
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any], index: int) -> ChunkChoice:
        """From an OpenAI-compatible server's JSON; ``index`` where it gave none."""
        data = _object(data, "a choice")
        delta = _object(data.get("delta"), "a choice's delta")
        role = delta.get("role")
        return cls(
            int(data.get("index", index)),
            ChoiceDelta(
                _text(delta.get("content"), "a delta's content"),
                None if role is None else str(role),
                _objects(delta.get("tool_calls"), "a delta's tool_calls"),
            ),
            _text(data.get("finish_reason"), "a choice's finish_reason"),
            _logprobs(data),
        )


@attrs.frozen
class CompletionChoice:
    """One generated continuation of a prompt (or, streaming, its new piece)."""

    index: int
    text: str
    finish_reason: str | None
    logprobs: OpenAIObject | None = None
    """The log probabilities the server sent (asked for with ``logprobs=N``), as sent."""

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this part of an answer."""
        return {
            "index": self.index,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "logprobs": _logprobs_dict(self.logprobs),
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any], index: int) -> CompletionChoice:
        """From an OpenAI-compatible server's JSON; ``index`` where it gave none."""
        data = _object(data, "a choice")
        return cls(
            int(data.get("index", index)),
            _text(data.get("text"), "a choice's text") or "",
            _text(data.get("finish_reason"), "a choice's finish_reason"),
            _logprobs(data),
        )


def _logprobs(choice: Mapping[str, Any]) -> OpenAIObject | None:
    logprobs = choice.get("logprobs")
    return None if logprobs is None else _object(logprobs, "a choice's logprobs")


def _logprobs_dict(logprobs: OpenAIObject | None) -> OpenAIDict | None:
    return None if logprobs is None else dict(logprobs)


C = TypeVar("C", ChatChoice, ChunkChoice, CompletionChoice)
A = TypeVar("A", bound="_Answer[Any]")


class _Answer(Displayable, Generic[C]):
    """What the four answer types share: OpenAI's envelope around their choices."""

    _object: ClassVar[str]
    _choice: ClassVar[Any]
    id: str
    created: int
    model: str
    choices: tuple[C, ...]
    usage: Usage | None

    @property
    def text(self) -> str:
        """The first choice's text (``""`` when there is none)."""
        return (self.choices[0].text or "") if self.choices else ""

    @property
    def finish_reason(self) -> str | None:
        """The first choice's finish reason (``None`` until it ends)."""
        return self.choices[0].finish_reason if self.choices else None

    def to_openai_dict(self) -> OpenAIDict:
        """The JSON OpenAI's API would send for this answer."""
        return {
            "id": self.id,
            "object": self._object,
            "created": self.created,
            "model": self.model,
            "choices": [choice.to_openai_dict() for choice in self.choices],
            "usage": self.usage.to_openai_dict() if self.usage else None,
        }

    @classmethod
    def from_openai_dict(cls: type[A], data: Mapping[str, Any]) -> A:
        """An answer from an OpenAI-compatible server's JSON (TypeError or ValueError
        when it is not of that shape)."""
        data = _object(data, "the answer")
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise TypeError(f"the answer's choices are not a list: {choices!r:.80}")
        return cls(  # type: ignore[call-arg]
            id=str(data.get("id", "")),
            created=int(data.get("created") or 0),
            model=str(data.get("model", "")),
            choices=tuple(
                cls._choice.from_openai_dict(choice, index) for index, choice in enumerate(choices)
            ),
            usage=Usage.from_openai_dict(data.get("usage")),
        )

    def _table(self) -> Table:
        rows = [(str(c.index), c.finish_reason or "", c.text or "") for c in self.choices]
        title = f"{type(self).__name__} {self.model!r} {self.usage}"
        return Table(title, ("choice", "finish", "text"), rows)


@attrs.frozen
class ChatCompletion(_Answer[ChatChoice]):
    """The answer to :meth:`~triton_sdk.Model.chat`: OpenAI's ``ChatCompletion`` shape.

    ``text`` is the first choice's content: the assistant's words, never the prompt.
    """

    _object: ClassVar[str] = "chat.completion"
    _choice: ClassVar[Any] = ChatChoice
    id: str
    created: int
    model: str
    choices: tuple[ChatChoice, ...]
    usage: Usage | None


@attrs.frozen
class ChatCompletionChunk(_Answer[ChunkChoice]):
    """One piece of a streamed chat: OpenAI's ``ChatCompletionChunk`` shape.

    The first chunk carries the role; one chunk per choice carries its ``finish_reason``;
    the last chunk of a stream carries ``usage`` (and no choices).
    """

    _object: ClassVar[str] = "chat.completion.chunk"
    _choice: ClassVar[Any] = ChunkChoice
    id: str
    created: int
    model: str
    choices: tuple[ChunkChoice, ...]
    usage: Usage | None = None


@attrs.frozen
class Completion(_Answer[CompletionChoice]):
    """The answer to :meth:`~triton_sdk.Model.complete`: OpenAI's ``Completion`` shape;
    ``text`` is the first choice's text (the prompt is never in it)."""

    _object: ClassVar[str] = "text_completion"
    _choice: ClassVar[Any] = CompletionChoice
    id: str
    created: int
    model: str
    choices: tuple[CompletionChoice, ...]
    usage: Usage | None


@attrs.frozen
class CompletionChunk(_Answer[CompletionChoice]):
    """One piece of a streamed completion (OpenAI streams ``Completion`` objects): new
    text per choice, a ``finish_reason`` once per choice, ``usage`` on the last chunk."""

    _object: ClassVar[str] = "text_completion"
    _choice: ClassVar[Any] = CompletionChoice
    id: str
    created: int
    model: str
    choices: tuple[CompletionChoice, ...]
    usage: Usage | None = None
