"""Results of chat and completion calls, shaped like OpenAI's (without depending on it).

Each type has ``to_openai_dict()``, the JSON OpenAI's API would send (it validates as the
``openai`` package's type of the same name), and ``from_openai_dict()`` for answers from an
OpenAI-compatible server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


@attrs.frozen
class Usage:
    """Token counts of one call, as the model reported them."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any] | None) -> Usage | None:
        if data is None:
            return None
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


@attrs.frozen
class ChatMessage:
    """The assistant's message of one choice."""

    content: str | None
    role: str = "assistant"
    tool_calls: tuple[Mapping[str, Any], ...] | None = None

    def to_openai_dict(self) -> OpenAIDict:
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

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "index": self.index,
            "message": self.message.to_openai_dict(),
            "finish_reason": self.finish_reason,
            "logprobs": None,
        }


def _choices_text(choices: tuple[Any, ...], read: Any) -> str:
    return (read(choices[0]) or "") if choices else ""


@attrs.frozen
class ChatCompletion(Displayable):
    """The answer to :meth:`~triton_sdk.Model.chat`: OpenAI's ``ChatCompletion`` shape.

    ``text`` is the first choice's content: the assistant's words, never the prompt.
    """

    id: str
    created: int
    model: str
    choices: tuple[ChatChoice, ...]
    usage: Usage | None

    @property
    def text(self) -> str:
        return _choices_text(self.choices, lambda choice: choice.message.content)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice.to_openai_dict() for choice in self.choices],
            "usage": self.usage.to_openai_dict() if self.usage else None,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any]) -> ChatCompletion:
        return cls(
            id=str(data.get("id", "")),
            created=int(data.get("created") or 0),
            model=str(data.get("model", "")),
            choices=tuple(
                ChatChoice(
                    index=int(choice.get("index", i)),
                    message=ChatMessage(
                        content=(choice.get("message") or {}).get("content"),
                        role=str((choice.get("message") or {}).get("role") or "assistant"),
                        tool_calls=_tool_calls(choice.get("message") or {}),
                    ),
                    finish_reason=choice.get("finish_reason"),
                )
                for i, choice in enumerate(data.get("choices") or ())
            ),
            usage=Usage.from_openai_dict(data.get("usage")),
        )

    def _table(self) -> Table:
        rows = [
            (str(c.index), c.finish_reason or "", c.message.content or "") for c in self.choices
        ]
        return Table(
            f"ChatCompletion {self.model!r} {self.usage}", ("choice", "finish", "text"), rows
        )


def _tool_calls(message: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...] | None:
    calls = message.get("tool_calls")
    return tuple(calls) if calls else None


@attrs.frozen
class ChoiceDelta:
    """What one chunk adds to a choice: the role (first chunk only) and new text."""

    content: str | None = None
    role: str | None = None

    def to_openai_dict(self) -> OpenAIDict:
        data: OpenAIDict = {"content": self.content}
        if self.role is not None:
            data["role"] = self.role
        return data


@attrs.frozen
class ChunkChoice:
    index: int
    delta: ChoiceDelta
    finish_reason: str | None = None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "index": self.index,
            "delta": self.delta.to_openai_dict(),
            "finish_reason": self.finish_reason,
            "logprobs": None,
        }


@attrs.frozen
class ChatCompletionChunk:
    """One piece of a streamed chat: OpenAI's ``ChatCompletionChunk`` shape.

    The first chunk carries the role; one chunk per choice carries its ``finish_reason``;
    the last chunk of a stream carries ``usage`` (and no choices).
    """

    id: str
    created: int
    model: str
    choices: tuple[ChunkChoice, ...]
    usage: Usage | None = None

    @property
    def text(self) -> str:
        """The new text of the first choice (``""`` when there is none)."""
        return _choices_text(self.choices, lambda choice: choice.delta.content)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice.to_openai_dict() for choice in self.choices],
            "usage": self.usage.to_openai_dict() if self.usage else None,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any]) -> ChatCompletionChunk:
        return cls(
            id=str(data.get("id", "")),
            created=int(data.get("created") or 0),
            model=str(data.get("model", "")),
            choices=tuple(
                ChunkChoice(
                    index=int(choice.get("index", i)),
                    delta=ChoiceDelta(
                        content=(choice.get("delta") or {}).get("content"),
                        role=(choice.get("delta") or {}).get("role"),
                    ),
                    finish_reason=choice.get("finish_reason"),
                )
                for i, choice in enumerate(data.get("choices") or ())
            ),
            usage=Usage.from_openai_dict(data.get("usage")),
        )


@attrs.frozen
class CompletionChoice:
    index: int
    text: str
    finish_reason: str | None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "index": self.index,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "logprobs": None,
        }


@attrs.frozen
class Completion(Displayable):
    """The answer to :meth:`~triton_sdk.Model.complete`: OpenAI's ``Completion`` shape;
    ``text`` is the first choice's text (the prompt is never in it)."""

    id: str
    created: int
    model: str
    choices: tuple[CompletionChoice, ...]
    usage: Usage | None

    @property
    def text(self) -> str:
        return _choices_text(self.choices, lambda choice: choice.text)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice.to_openai_dict() for choice in self.choices],
            "usage": self.usage.to_openai_dict() if self.usage else None,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any]) -> Completion:
        return cls(
            id=str(data.get("id", "")),
            created=int(data.get("created") or 0),
            model=str(data.get("model", "")),
            choices=_completion_choices(data),
            usage=Usage.from_openai_dict(data.get("usage")),
        )

    def _table(self) -> Table:
        rows = [(str(c.index), c.finish_reason or "", c.text) for c in self.choices]
        return Table(f"Completion {self.model!r} {self.usage}", ("choice", "finish", "text"), rows)


def _completion_choices(data: Mapping[str, Any]) -> tuple[CompletionChoice, ...]:
    return tuple(
        CompletionChoice(
            index=int(choice.get("index", i)),
            text=str(choice.get("text") or ""),
            finish_reason=choice.get("finish_reason"),
        )
        for i, choice in enumerate(data.get("choices") or ())
    )


@attrs.frozen
class CompletionChunk:
    """One piece of a streamed completion (OpenAI streams ``Completion`` objects): new
    text per choice, a ``finish_reason`` once per choice, ``usage`` on the last chunk."""

    id: str
    created: int
    model: str
    choices: tuple[CompletionChoice, ...]
    usage: Usage | None = None

    @property
    def text(self) -> str:
        return _choices_text(self.choices, lambda choice: choice.text)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None

    def to_openai_dict(self) -> OpenAIDict:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice.to_openai_dict() for choice in self.choices],
            "usage": self.usage.to_openai_dict() if self.usage else None,
        }

    @classmethod
    def from_openai_dict(cls, data: Mapping[str, Any]) -> CompletionChunk:
        return cls(
            id=str(data.get("id", "")),
            created=int(data.get("created") or 0),
            model=str(data.get("model", "")),
            choices=_completion_choices(data),
            usage=Usage.from_openai_dict(data.get("usage")),
        )
