"""Chat templates: read from a string or a file, rendered as transformers'
``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`` renders them.

The environment below reproduces transformers' (a jinja2 sandbox with ``trim_blocks``,
``lstrip_blocks`` and loop controls; its ``tojson``, ``raise_exception``, ``strftime_now``,
``dict`` and ``namespace``; the ``{% generation %}`` tag as a no-op), and so do the inputs
(messages without their ``None`` values, reasoning under its usual names, special tokens
from the tokenizer config, extra variables overriding them), so that the prompt a model
receives is the one it was trained on, byte for byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import attrs

from ._errors import InvalidInputError

__all__ = ["PLAIN_TOKENS", "ChatTemplate", "ChatTemplateError", "Message", "load_chat_template"]

Message = Mapping[str, Any]
"""A chat message as OpenAI's API has it: ``{"role": ..., "content": ...}`` and optional
fields (``tool_calls``, ``name``, ``tool_call_id``, ...), handed to the template unchanged."""

SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# What a template without a tokenizer config sees: templates that close each turn with
# eos_token (most do) render instead of failing on an undefined name.
PLAIN_TOKENS: Mapping[str, str] = {"bos_token": "", "eos_token": ""}
_SET_BY_CHAT: Final = frozenset({"messages", "tools", "add_generation_prompt"})
"""The variables every render sets itself."""


def _check_tools(tools: object) -> None:
    """Refuse ``tools`` that are not a list of mappings, as the OpenAI route does."""
    if tools is None:
        return
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise ChatTemplateError(f"tools is a list of mappings, got {type(tools).__name__}")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ChatTemplateError(f"tool {index} is a {type(tool).__name__}, not a mapping")


class ChatTemplateError(InvalidInputError):
    """No chat template could be found, or the template refused the messages
    (its ``raise_exception(...)``). Nothing was sent."""


@attrs.frozen
class ChatTemplate:
    """A chat template with the special tokens it may refer to.

    Attributes:
        templates: the template source by name (``"default"`` for a single template; a
            tokenizer config may also have ``"tool_use"``, chosen when tools are given).
        special_tokens: ``bos_token``, ``eos_token``, ... as the tokenizer config has them
            (``bos_token`` and ``eos_token`` empty for a template given as a string or a
            .jinja file).
        origin: where the template came from, for error messages.
    """

    templates: Mapping[str, str]
    special_tokens: Mapping[str, str] = attrs.field(factory=lambda: dict(PLAIN_TOKENS))
    origin: str = "the chat_template argument"

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        variables: Mapping[str, Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt for ``messages``: the template rendered with the special tokens, the
        tools and ``variables`` (which override the special tokens)."""
        given_messages: object = messages  # (annotations are not checked at run time)
        if not isinstance(given_messages, Sequence) or isinstance(given_messages, (str, bytes)):
            raise ChatTemplateError(
                f"messages is a list of mappings, got {type(given_messages).__name__}"
            )
        if not messages:
            raise ChatTemplateError("chat needs at least one message")
        conversation = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise ChatTemplateError(
                    f"message {index} is a {type(message).__name__}, not a mapping with "
                    "'role' and 'content'"
                )
            conversation.append(
                _with_reasoning({k: v for k, v in message.items() if v is not None})
            )
        given: object = variables  # (annotations are not checked at run time)
        if given is not None and not (
            isinstance(given, Mapping) and all(isinstance(key, str) for key in given)
        ):
            raise ChatTemplateError(
                f"chat_template_kwargs is a mapping of names to values, got {variables!r:.80}"
            )
        taken = sorted(_SET_BY_CHAT.intersection(variables or {}))
        if taken:
            raise ChatTemplateError(
                f"chat_template_kwargs cannot set {', '.join(map(repr, taken))}: the chat "
                "call sets it (messages, tools=, a generation prompt)"
            )
        _check_tools(tools)
        name = "tool_use" if tools is not None and "tool_use" in self.templates else "default"
        template = _compile(self.templates[name])
        # documents (for retrieval templates) come as transformers takes them: a variable.
        context = {"documents": None, **self.special_tokens, **(variables or {})}
        try:
            return str(
                template.render(
                    messages=conversation,
                    tools=list(tools) if tools is not None else None,
                    add_generation_prompt=add_generation_prompt,
                    **context,
                )
            )
        except _TemplateRefusal as refusal:
            raise ChatTemplateError(f"the chat template refused the messages: {refusal}") from None
        except Exception as error:  # a template is code: report its failure as ours
            raise ChatTemplateError(
                f"the chat template from {self.origin} failed: {type(error).__name__}: {error}"
            ) from error


def load_chat_template(value: str | os.PathLike[str], origin: str | None = None) -> ChatTemplate:
    """A template from Jinja source, or from a path to a tokenizer_config.json, a .jinja file,
    or a directory holding either (as a Hugging Face model directory does)."""
    if not isinstance(value, (str, os.PathLike)):
        raise ChatTemplateError(
            "chat_template is Jinja source or the path of a tokenizer_config.json or .jinja "
            f"file, got {type(value).__name__}"
        )
    if isinstance(value, str) and not value.strip():
        # (Path("") is the working directory: a tokenizer_config.json there was read.)
        raise ChatTemplateError(
            "chat_template is empty: give Jinja source or the path of a "
            "tokenizer_config.json or .jinja file"
        )
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return ChatTemplate(
            {"default": value}, PLAIN_TOKENS, origin or "the chat_template argument"
        )
    path = Path(value)
    if path.is_dir():
        for candidate in ("tokenizer_config.json", "chat_template.jinja"):
            if (path / candidate).is_file():
                found = load_chat_template(path / candidate)
                if found.templates:
                    return found
        raise ChatTemplateError(
            f"{path} holds neither a tokenizer_config.json nor a chat_template.jinja"
        )
    if not path.is_file():
        meant_a_file = not isinstance(value, str) or (
            "\n" not in value and (path.suffix in (".jinja", ".json") or os.sep in value)
        )
        missing = f" ({path} does not exist)" if meant_a_file and not path.exists() else ""
        raise ChatTemplateError(
            f"chat_template {str(value)[:80]!r} is neither a Jinja template (no '{{{{' or '{{%') "
            f"nor a path to a tokenizer_config.json or .jinja file{missing}"
        )
    try:
        return _from_file(path)
    except ChatTemplateError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        # (Unreadable, not UTF-8, not JSON, or JSON of another shape.)
        raise ChatTemplateError(f"cannot read a chat template from {path}: {error!r}") from None


def _from_file(path: Path) -> ChatTemplate:
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return ChatTemplate({"default": text}, PLAIN_TOKENS, str(path))
    config = json.loads(text)
    tokens = {
        name: token["content"] if isinstance(token, Mapping) else str(token)
        for name in SPECIAL_TOKENS
        if (token := config.get(name)) is not None
    }
    source = config.get("chat_template")
    beside = path.parent / "chat_template.jinja"
    if beside.is_file():  # as transformers loads it: the file wins over the config's
        source = beside.read_text(encoding="utf-8")
    if source is None:
        raise ChatTemplateError(
            f"{path} has no chat_template (nor a chat_template.jinja beside it)"
        )
    if isinstance(source, list):  # named templates: [{"name": "default", "template": ...}]
        templates = {entry["name"]: entry["template"] for entry in source}
        if "default" not in templates:
            raise ChatTemplateError(
                f"{path} has templates {sorted(templates)} and no 'default' one"
            )
        return ChatTemplate(templates, tokens, str(path))
    return ChatTemplate({"default": str(source)}, tokens, str(path))


def _with_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


class _TemplateRefusal(Exception):
    pass


@lru_cache(maxsize=32)
def _compile(source: str) -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text for training
        masks; rendering for inference keeps its body as it is."""

        tags = {"generation"}  # noqa: RUF012 (jinja's own class attribute)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Any) -> Any:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            for name in dict(*rest, **kwargs):
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, dict(*rest, **kwargs))

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: object) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a chat template may not store {name!r} on a namespace"
                )

    class Dict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message: str) -> None:
        raise _TemplateRefusal(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        # jinja's own tojson escapes HTML characters, which a prompt must not have
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals.update(
        raise_exception=raise_exception, strftime_now=strftime_now, dict=Dict(), namespace=Namespace
    )
    try:
        return environment.from_string(source)
    except jinja2.TemplateSyntaxError as error:
        raise ChatTemplateError(f"the chat template does not parse: {error}") from None
