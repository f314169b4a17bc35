"""Chat and completions over Triton's own endpoints: the schema adapters of the LLM
backends, and the assembly of their responses into OpenAI-shaped results.

An adapter is chosen from the model's inputs and outputs (never from its backend string):
it turns a prompt and OpenAI-style options into the fields of a generate request, and
each response into a :class:`Step`. The rest (choices, finish reasons, usage, stream
chunks) is the same for every backend and lives here, free of I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

import attrs
import numpy as np

from ._errors import InvalidInputError, UnsupportedError
from ._llm_types import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionChunk,
    Usage,
)
from ._ops import JSONValue
from ._spec import ModelSpec

__all__ = [
    "VLLM",
    "LLMAdapter",
    "LLMCall",
    "SamplingValue",
    "StreamAssembler",
    "TensorRTLLM",
    "TensorRTLLMAPI",
    "adapter_for",
    "custom",
    "plain_options",
]

SamplingValue = (
    bool
    | int
    | float
    | str
    | Sequence[str]
    | Sequence[int]
    | Mapping[str, object]
    | np.generic
    | None
)
"""The value of a sampling option: ``max_tokens=64``, ``temperature=0.2``, ``stop=["\\n"]``,
a backend's own (``logit_bias={"50256": -100.0}``), a numpy scalar; ``None`` leaves the
option out (the server's default)."""

Event = Mapping[str, JSONValue]


@attrs.frozen
class Step:
    """What one response says, per choice: its text (all of it, or in a stream the new
    part), its finish reason if it ended, and the token counts the model reported."""

    texts: tuple[str, ...]
    finish_reasons: tuple[str | None, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: tuple[int, ...] | None = None
    first_choice: int = 0  # texts[i] belongs to choice first_choice + i

    def choices(self) -> Iterator[tuple[int, str, str | None, int | None]]:
        """(choice, text, finish reason, completion tokens) for each choice it holds."""
        counts = self.completion_tokens
        for i, text in enumerate(self.texts):
            finish = self.finish_reasons[i] if i < len(self.finish_reasons) else None
            tokens = counts[i] if counts is not None and i < len(counts) else None
            yield self.first_choice + i, text, finish, tokens


def _items(value: JSONValue | None) -> list[JSONValue]:
    """A generate field as a flat list (one element arrives as a plain value)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [item for element in value for item in _items(element)]
    return [value]


def _texts(value: JSONValue | None) -> tuple[str, ...]:
    return tuple("" if item is None else str(item) for item in _items(value))


def _reasons(value: JSONValue | None) -> tuple[str | None, ...]:
    return tuple(
        None if item in (None, "", "None", "null") else str(item) for item in _items(value)
    )


def _count(value: JSONValue | None) -> int | None:
    items = _items(value)
    return int(items[0]) if items else None  # type: ignore[arg-type]


def _counts(value: JSONValue | None) -> tuple[int, ...] | None:
    """Token counts, one per choice (None when the model sent none)."""
    items = _items(value)
    return tuple(int(item) for item in items) if items else None  # type: ignore[arg-type]


class LLMAdapter(ABC):
    """How one family of LLM models is asked: which fields carry the prompt and the
    options, and where the text, finish reason and token counts come back.

    Attributes:
        spec: the model's spec.
        options: the sampling options it accepts (OpenAI names and the backend's own).
    """

    family: ClassVar[str]
    allows_n: ClassVar[bool] = False
    # Each streamed response holds the whole text so far, not the new piece.
    cumulative: ClassVar[bool] = False
    # The input that keeps the prompt out of a whole answer; a model without it (an older
    # backend) puts the prompt first, and it is cut off.
    exclude_input: ClassVar[str | None] = None

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    @property
    @abstractmethod
    def options(self) -> frozenset[str]:
        """The sampling options (``temperature``, ``max_tokens``, ...) this adapter can
        send to its model; others are refused before sending."""

    @abstractmethod
    def fields(
        self, prompt: str, options: Mapping[str, SamplingValue], stream: bool
    ) -> dict[str, object]:
        """The generate fields (inputs, or parameters for names that are not inputs)."""

    @abstractmethod
    def step(self, event: Event) -> Step:
        """The texts, finish reasons and counts of one response."""

    def inferred_finish(self, tokens: int | None, options: Mapping[str, SamplingValue]) -> str:
        """The finish reason of a choice the model did not give one for: ``"length"``
        when it produced ``max_tokens`` tokens, ``"stop"`` otherwise."""
        limit = options.get("max_tokens")
        if tokens is not None and isinstance(limit, int) and tokens >= limit:
            return "length"
        return "stop"

    def echoes(self, stream: bool) -> bool:
        """Whether the text starts with the prompt (it is then cut off). Streams never
        carry it."""
        flag = self.exclude_input
        return not stream and flag is not None and not self._has(flag)

    def _sent_options(
        self, options: Mapping[str, SamplingValue]
    ) -> Iterator[tuple[str, SamplingValue]]:
        """The options to send: ``n=1`` is left out where the model has no n input."""
        for name, value in options.items():
            if not (name == "n" and value == 1 and not self.allows_n):
                yield name, value

    def check(self, options: Mapping[str, SamplingValue]) -> None:
        """Refuse, before anything is sent, options the model cannot take."""
        unknown = sorted(set(options) - self.options)
        if unknown:
            hint = (
                " (custom(..., parameters=[...]) names the options the model reads)"
                if self.family == "custom"
                else ""
            )
            raise InvalidInputError(
                f"model {self.spec.name!r} ({self.family}) does not take "
                f"{', '.join(map(repr, unknown))}; the options it takes: "
                f"{', '.join(sorted(self.options))}{hint}",
                model=self.spec.name,
            )
        n = options.get("n", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidInputError(
                f"n must be a positive integer, got {n!r}", model=self.spec.name
            )
        if n > 1 and not self.allows_n:
            raise UnsupportedError(
                f"model {self.spec.name!r} ({self.family}) gives one choice per request: "
                f"n={n} is not supported",
                model=self.spec.name,
            )

    def _has(self, name: str) -> bool:
        return name in self.spec.inputs

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec.name!r}>"


_INTEGER_OPTIONS: Final = frozenset(
    {"max_tokens", "max_completion_tokens", "n", "seed", "top_k", "min_tokens"}
)
_NUMBER_OPTIONS: Final = frozenset(
    {
        "temperature",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "length_penalty",
    }
)


def plain_options(options: Mapping[str, SamplingValue], model: str) -> dict[str, SamplingValue]:
    """The options with numpy scalars as the Python values they hold (``max_tokens``
    read from an array), and checked: OpenAI's integer and number options are of those
    types (their ranges are the server's to check), ``stop`` a str or a sequence of
    them."""
    options = {name: value for name, value in options.items() if value is not None}
    if "max_tokens" in options and "max_completion_tokens" in options:
        raise InvalidInputError(
            "max_tokens and max_completion_tokens are the same limit: give one", model=model
        )
    plain: dict[str, SamplingValue] = {}
    for name, given in options.items():
        value: object = given  # (None, a numpy scalar or an array of none, despite the type)
        if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
            value = value.item()
        elif isinstance(value, np.ndarray):  # (token ids, say)
            value = value.tolist()
        if value is None:
            continue  # (a 0-d array of None: not given either)
        if (name in _INTEGER_OPTIONS and (type(value) is not int)) or (
            name in _NUMBER_OPTIONS and type(value) not in (int, float)
        ):
            kind = "an integer" if name in _INTEGER_OPTIONS else "a number"
            raise InvalidInputError(f"{name} is {kind}, got {value!r}", model=model)
        if name == "stop" and not isinstance(value, str):
            if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
                raise InvalidInputError(
                    f"stop is a str or a list of str, got {value!r}", model=model
                )
            value = list(value)
        plain[name] = cast("SamplingValue", value)
    return plain


def _json_option(value: object, name: str, model: str) -> str:
    """``value`` as strict JSON text (no NaN), or an InvalidInputError naming the option."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"{name} cannot be sent as JSON: {error}", model=model) from None


def _json_options(options: Mapping[str, object], model: str) -> str:
    """``options`` as one strict JSON object; when that fails, the error names the option
    that cannot be sent."""
    try:
        return json.dumps(options, allow_nan=False)
    except (TypeError, ValueError):
        for name, value in options.items():
            _json_option(value, name, model)
        raise


def _stop_list(value: SamplingValue | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(item) for item in value]  # type: ignore[union-attr]


OPENAI_OPTIONS = frozenset(
    {
        "max_tokens",
        "stop",
        "n",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_tokens",
    }
)

VLLM_ONLY = frozenset(
    {
        "min_p",
        "ignore_eos",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "length_penalty",
        "best_of",
        "logprobs",
        "prompt_logprobs",
        "logit_bias",
        "bad_words",
        "allowed_token_ids",
        "truncate_prompt_tokens",
        "guided_decoding",
        "structured_outputs",
        "lora_name",  # Triton's vLLM backend reads it to pick a LoRA adapter
    }
)


class VLLM(LLMAdapter):
    """Triton's vLLM backend: ``text_input``, ``stream``, the sampling options as
    ``sampling_parameters`` JSON (stop lists included), ``exclude_input_in_output``, and
    ``return_finish_reason`` / ``return_num_input_tokens`` / ``return_num_output_tokens``
    where the model has them."""

    family = "vLLM"
    allows_n = True
    exclude_input: ClassVar[str | None] = "exclude_input_in_output"
    _flags = (
        "exclude_input_in_output",
        "return_finish_reason",
        "return_num_input_tokens",
        "return_num_output_tokens",
    )

    @property
    def options(self) -> frozenset[str]:
        return OPENAI_OPTIONS | VLLM_ONLY

    def fields(
        self, prompt: str, options: Mapping[str, SamplingValue], stream: bool
    ) -> dict[str, object]:
        sampling = {key: value for key, value in options.items() if key != "stop"}
        if "stop" in options:
            sampling["stop"] = _stop_list(options["stop"])
        fields: dict[str, object] = {"text_input": prompt, "stream": stream}
        if sampling:
            fields["sampling_parameters"] = _json_options(sampling, self.spec.name)
        fields.update((flag, True) for flag in self._flags if self._has(flag))
        return fields

    def step(self, event: Event) -> Step:
        return Step(
            texts=_texts(event.get("text_output")),
            finish_reasons=_reasons(event.get("finish_reason")),
            prompt_tokens=_count(event.get("num_input_tokens")),
            completion_tokens=_counts(event.get("num_output_tokens")),
        )


class TensorRTLLM(LLMAdapter):
    """TensorRT-LLM's ensemble or BLS model: ``text_input``, ``max_tokens`` (required),
    ``stop_words``/``bad_words`` lists, one input per sampling option, and
    ``num_input_tokens``/``num_output_tokens`` where the model has them.

    It reports no finish reason: a choice that used up ``max_tokens`` finished for
    ``"length"``, any other for ``"stop"``. A model without the token-count outputs (before
    TensorRT-LLM 0.17) is asked for ``return_log_probs`` and its generated tokens are
    counted by their log-probabilities; its prompt's tokens are not counted (0).
    """

    family = "TensorRT-LLM"
    exclude_input: ClassVar[str | None] = "exclude_input_in_output"
    _fixed = frozenset(
        {
            "text_input",
            "stream",
            "exclude_input_in_output",
            "return_log_probs",
            "return_num_input_tokens",
            "return_num_output_tokens",
            "num_return_sequences",
        }
    )

    def _input(self, option: str) -> str:
        """The model's input for an option (OpenAI's name, or older TensorRT-LLM names)."""
        for name in {
            "stop": ("stop_words",),
            "seed": ("seed", "random_seed"),
            "min_tokens": ("min_tokens", "min_length"),
            "n": ("num_return_sequences",),
        }.get(option, ()):
            if self._has(name):
                return name
        return option

    @property
    def allows_n(self) -> bool:  # type: ignore[override]
        return self._has("num_return_sequences")

    @property
    def options(self) -> frozenset[str]:
        openai = {name for name in OPENAI_OPTIONS if self._has(self._input(name))}
        own = {name for name in self.spec.inputs if name not in self._fixed}
        return frozenset(openai | own | {"n"})

    def check(self, options: Mapping[str, SamplingValue]) -> None:
        super().check(options)
        beams = options.get("beam_width", 1)
        if isinstance(beams, int) and beams > 1:
            raise UnsupportedError(
                f"model {self.spec.name!r}: beam_width={beams} returns every beam; chat and "
                "complete take one (use model.generate for beams)",
                model=self.spec.name,
            )
        if "max_tokens" not in options:
            raise InvalidInputError(
                f"model {self.spec.name!r} ({self.family}) needs max_tokens", model=self.spec.name
            )
        given: dict[str, str] = {}
        for name in options:  # (stop and stop_words, seed and random_seed: one input each)
            first = given.setdefault(self._input(name), name)
            if first != name:
                raise InvalidInputError(
                    f"{first} and {name} both set the input {self._input(name)!r} of model "
                    f"{self.spec.name!r}: give one",
                    model=self.spec.name,
                )

    def fields(
        self, prompt: str, options: Mapping[str, SamplingValue], stream: bool
    ) -> dict[str, object]:
        fields: dict[str, object] = {"text_input": prompt}
        for name, value in self._sent_options(options):
            target = self._input(name)
            fields[target] = _stop_list(value) if target in ("stop_words", "bad_words") else value
        flags = ["exclude_input_in_output", "return_num_input_tokens", "return_num_output_tokens"]
        if "num_output_tokens" not in self.spec.outputs:
            flags.append("return_log_probs")  # counted by their log-probabilities instead
        fields.update((flag, True) for flag in flags if self._has(flag))
        if self._has("stream"):
            fields["stream"] = stream
        return fields

    def step(self, event: Event) -> Step:
        texts = _texts(event.get("text_output"))
        completion = _counts(event.get("num_output_tokens"))
        if completion is None and event.get("output_log_probs") is not None and len(texts) == 1:
            completion = (len(_items(event.get("output_log_probs"))),)
        prompt = _count(event.get("num_input_tokens"))
        # With num_return_sequences > 1 each sequence comes in responses of its own.
        choice = _count(event.get("sequence_index")) or 0
        return Step(texts, (), prompt or 0, completion, choice)


class TensorRTLLMAPI(LLMAdapter):
    """TensorRT-LLM's LLM-API model: ``text_input``, ``streaming``, one
    ``sampling_param_<name>`` input per option, ``return_finish_reason``. Each streamed
    response holds the text so far (made into deltas here). It reports no token counts
    (no usage)."""

    family = "TensorRT-LLM LLM API"
    prefix = "sampling_param_"
    cumulative = True  # it streams output.text, the text so far
    exclude_input: ClassVar[str | None] = "sampling_param_exclude_input_from_output"
    _fixed = frozenset({"exclude_input_from_output", "return_perf_metrics"})

    @property
    def allows_n(self) -> bool:  # type: ignore[override]
        return self._has(self.prefix + "n")

    @property
    def options(self) -> frozenset[str]:
        own = {
            name.removeprefix(self.prefix)
            for name in self.spec.inputs
            if name.startswith(self.prefix)
        }
        return frozenset((own - self._fixed) | {"n"})

    def fields(
        self, prompt: str, options: Mapping[str, SamplingValue], stream: bool
    ) -> dict[str, object]:
        fields: dict[str, object] = {"text_input": prompt}
        for name, value in self._sent_options(options):
            fields[self.prefix + name] = _stop_list(value) if name == "stop" else value
        for flag, value in (
            ("streaming", stream),
            ("sampling_param_exclude_input_from_output", True),
            ("return_finish_reason", True),
        ):
            if self._has(flag):
                fields[flag] = value
        return fields

    def step(self, event: Event) -> Step:
        return Step(
            texts=_texts(event.get("text_output")),
            finish_reasons=_reasons(event.get("finish_reason")),
        )


@attrs.frozen
class CustomSchema:
    """Where a user's own text model takes its prompt and gives its text (see :func:`custom`)."""

    prompt: str
    text: str
    stream: str | None = None
    finish_reason: str | None = None
    prompt_tokens: str | None = None
    completion_tokens: str | None = None
    parameters: frozenset[str] = frozenset()
    echoes_prompt: bool = False


_TEXT: Final[tuple[str, ...]] = ("BYTES",)
_BOOL: Final[tuple[str, ...]] = ("BOOL",)
_COUNTS: Final[tuple[str, ...]] = (
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
)


def _check_role(
    spec: ModelSpec, kind: str, role: str, name: str | None, datatypes: tuple[str, ...]
) -> None:
    """Refuse a :func:`custom` schema naming a tensor the model lacks, or one whose
    datatype cannot play its role."""
    if name is None:
        return
    tensors = spec.inputs if kind == "input" else spec.outputs
    if name not in tensors:
        raise InvalidInputError(
            f"model {spec.name!r} has no {kind} {name!r} for the {role}; its {kind}s are "
            f"{', '.join(tensors)}",
            model=spec.name,
        )
    datatype = tensors[name].datatype
    if datatype not in datatypes:
        wanted = "an integer" if datatypes is _COUNTS else " or ".join(datatypes)
        raise InvalidInputError(
            f"model {spec.name!r}: {kind} {name!r} is {datatype}, so it cannot be the "
            f"{role} ({wanted} {kind} is needed)",
            model=spec.name,
        )


class Custom(LLMAdapter):
    """A model of the user's own: a text input, a text output, options as inputs of the
    same name or as request parameters."""

    family = "custom"

    def __init__(self, spec: ModelSpec, schema: CustomSchema) -> None:
        super().__init__(spec)
        self.schema = schema
        for role, name, datatypes in (
            ("prompt", schema.prompt, _TEXT),
            ("stream", schema.stream, _BOOL),
        ):
            _check_role(spec, "input", role, name, datatypes)
        for role, name, datatypes in (
            ("text", schema.text, _TEXT),
            ("finish_reason", schema.finish_reason, _TEXT),
            ("prompt_tokens", schema.prompt_tokens, _COUNTS),
            ("completion_tokens", schema.completion_tokens, _COUNTS),
        ):
            _check_role(spec, "output", role, name, datatypes)

    @property
    def options(self) -> frozenset[str]:
        taken = {self.schema.prompt, self.schema.stream}
        inputs = {name for name in self.spec.inputs if name not in taken}
        return frozenset(inputs | self.schema.parameters | {"n"})

    def fields(
        self, prompt: str, options: Mapping[str, SamplingValue], stream: bool
    ) -> dict[str, object]:
        fields: dict[str, object] = {self.schema.prompt: prompt}
        for name, value in options.items():
            if name == "n":
                continue
            if (
                name in self.spec.inputs
                or not isinstance(value, Sequence)
                or isinstance(value, str)
            ):
                fields[name] = value
            else:  # a request parameter is a scalar: lists travel as JSON text
                fields[name] = _json_option(list(value), name, self.spec.name)
        if self.schema.stream is not None:
            fields[self.schema.stream] = stream
        return fields

    def step(self, event: Event) -> Step:
        schema = self.schema
        completion = (
            _count(event.get(schema.completion_tokens)) if schema.completion_tokens else None
        )
        # One request is one choice: a text output of several elements (pieces) is joined.
        pieces = _texts(event.get(schema.text))
        return Step(
            texts=("".join(pieces),) if pieces else (),
            finish_reasons=_reasons(event.get(schema.finish_reason))
            if schema.finish_reason
            else (),
            prompt_tokens=_count(event.get(schema.prompt_tokens)) if schema.prompt_tokens else None,
            completion_tokens=(completion,) if completion is not None else None,
        )

    def echoes(self, stream: bool) -> bool:
        return self.schema.echoes_prompt


def custom(
    prompt: str,
    text: str,
    *,
    stream: str | None = None,
    finish_reason: str | None = None,
    prompt_tokens: str | None = None,
    completion_tokens: str | None = None,
    parameters: Iterable[str] = (),
    echoes_prompt: bool = False,
) -> CustomSchema:
    """The schema of a text model of your own, for ``chat``/``complete(adapter=...)``.

    Args:
        prompt: the BYTES input that takes the prompt.
        text: the BYTES output that holds the answer (or, streaming, each new piece);
            an output of several elements is one text, its elements joined.
        stream: a BOOL input that turns streaming on, if the model has one.
        finish_reason: an output holding ``"stop"``/``"length"``, if any. Without it, a
            choice finished for ``"length"`` when ``completion_tokens`` shows it reached
            ``max_tokens``, and for ``"stop"`` otherwise.
        prompt_tokens: an output with the prompt's token count, if any.
        completion_tokens: an output with the generated token count (per response when
            streaming), if any.
        parameters: options sent as request parameters; options named like one of the
            model's inputs are sent as that input.
        echoes_prompt: the model's text starts with the prompt, which is then cut off.
    """
    return CustomSchema(
        prompt,
        text,
        stream,
        finish_reason,
        prompt_tokens,
        completion_tokens,
        frozenset(parameters),
        echoes_prompt,
    )


_TENSORRT_LLM_MARKS = ("stop_words", "bad_words", "end_id", "beam_width", "return_log_probs")

Adapter = LLMAdapter | CustomSchema
"""What ``adapter=`` takes: a :func:`custom` schema (or an adapter already built)."""


def adapter_for(spec: ModelSpec, given: Adapter | None = None) -> LLMAdapter:
    """The adapter for ``spec``: the one given, else the one its inputs and outputs name."""
    if isinstance(given, CustomSchema):
        return Custom(spec, given)
    if given is not None:
        return given
    inputs, outputs = spec.inputs, spec.outputs
    if "text_input" in inputs and "text_output" in outputs:
        if "sampling_parameters" in inputs:
            return VLLM(spec)
        if any(name.startswith(TensorRTLLMAPI.prefix) for name in inputs):
            return TensorRTLLMAPI(spec)
        if "max_tokens" in inputs and any(name in inputs for name in _TENSORRT_LLM_MARKS):
            return TensorRTLLM(spec)
    texts_in = [
        name
        for name, tensor in inputs.items()
        if tensor.datatype == "BYTES" and not tensor.optional
    ]
    texts_out = [name for name, tensor in outputs.items() if tensor.datatype == "BYTES"]
    if len(texts_in) == 1 and len(texts_out) == 1:
        stream = "stream" if "stream" in inputs and inputs["stream"].datatype == "BOOL" else None
        return Custom(spec, custom(texts_in[0], texts_out[0], stream=stream))
    raise UnsupportedError(
        f"model {spec.name!r} is not a text model this client knows: it needs a text (BYTES) "
        f"prompt input and a text output (inputs: {', '.join(inputs) or 'none'}; outputs: "
        f"{', '.join(outputs) or 'none'}). For a model of your own, pass "
        "adapter=triton_sdk.llm.custom(prompt=INPUT, text=OUTPUT)",
        model=spec.name,
    )


T = TypeVar("T", ChatCompletionChunk, CompletionChunk)


def with_max_tokens(options: dict[str, SamplingValue]) -> dict[str, SamplingValue]:
    """OpenAI's ``max_completion_tokens`` as the ``max_tokens`` the backends read (the
    options are plain: not both)."""
    options = dict(options)
    options["max_tokens"] = options.pop("max_completion_tokens")
    return options


@attrs.frozen
class LLMCall:
    """One chat or completion call, decided before anything is sent."""

    adapter: LLMAdapter
    prompt: str
    options: Mapping[str, SamplingValue]
    stream: bool
    fields: dict[str, object]
    id: str
    created: int

    @classmethod
    def plan(
        cls,
        adapter: LLMAdapter,
        prompt: str,
        options: Mapping[str, SamplingValue],
        *,
        stream: bool,
        prefix: str,
    ) -> LLMCall:
        options = plain_options(options, adapter.spec.name)
        takes = adapter.options
        # (A model that takes neither name refuses it by the name it was given.)
        renamed = "max_completion_tokens" not in takes and "max_tokens" in takes
        if "max_completion_tokens" in options and renamed:
            options = with_max_tokens(options)
        adapter.check(options)
        return cls(
            adapter,
            prompt,
            options,
            stream,
            adapter.fields(prompt, options, stream),
            f"{prefix}-{uuid.uuid4().hex}",
            int(time.time()),
        )

    @property
    def model(self) -> str:
        return self.adapter.spec.name

    @property
    def n(self) -> int:
        value = self.options.get("n", 1)
        return value if isinstance(value, int) else 1

    def _answers(self, events: Sequence[Event]) -> tuple[list[str], list[str], Usage | None]:
        """The choices' texts, finish reasons and usage from all the responses of a call
        (one, or a decoupled model's several)."""
        texts: dict[int, str] = {}
        reasons: dict[int, str] = {}
        tokens: dict[int, int] = {}
        prompt_tokens: int | None = None
        for event in events:
            step = self.adapter.step(event)
            if step.prompt_tokens is not None:
                prompt_tokens = step.prompt_tokens
            for choice, text, finish, count in step.choices():
                texts[choice] = texts.get(choice, "") + text
                if finish is not None:
                    reasons[choice] = finish
                if count is not None:
                    tokens[choice] = tokens.get(choice, 0) + count
        order = sorted(texts)
        answers = [texts[choice] for choice in order]
        if self.adapter.echoes(stream=False):
            answers = [text.removeprefix(self.prompt) for text in answers]
        finishes = [
            reasons.get(choice) or self.adapter.inferred_finish(tokens.get(choice), self.options)
            for choice in order
        ]
        usage = None
        if tokens or prompt_tokens is not None:
            usage = Usage(prompt_tokens or 0, sum(tokens.values()))
        return answers, finishes, usage

    def chat_completion(self, events: Sequence[Event]) -> ChatCompletion:
        texts, reasons, usage = self._answers(events)
        choices = tuple(
            ChatChoice(i, ChatMessage(text), reason)
            for i, (text, reason) in enumerate(zip(texts, reasons, strict=True))
        )
        return ChatCompletion(self.id, self.created, self.model, choices, usage)

    def completion(self, events: Sequence[Event]) -> Completion:
        texts, reasons, usage = self._answers(events)
        choices = tuple(
            CompletionChoice(i, text, reason)
            for i, (text, reason) in enumerate(zip(texts, reasons, strict=True))
        )
        return Completion(self.id, self.created, self.model, choices, usage)

    def chat_chunks(self, *, usage: bool = True) -> StreamAssembler[ChatCompletionChunk]:
        return StreamAssembler(self, chat=True, usage=usage)

    def completion_chunks(self, *, usage: bool = True) -> StreamAssembler[CompletionChunk]:
        return StreamAssembler(self, chat=False, usage=usage)


class StreamAssembler(Generic[T]):
    """Turns a stream's responses into chunks: a first chunk with the role (chat), one
    chunk per new piece of text, one chunk per choice with its finish reason, and a last
    chunk with the usage."""

    def __init__(self, call: LLMCall, *, chat: bool, usage: bool = True) -> None:
        self._call = call
        self._chat = chat
        self._usage = usage  # a last chunk with the usage
        self._finished = [False] * call.n
        self._tokens: list[int | None] = [None] * call.n
        self._prompt_tokens: int | None = None
        self._echo = [call.prompt if call.adapter.echoes(stream=True) else ""] * call.n
        self._seen = [""] * call.n  # a cumulative stream's text so far
        self._started = False

    def _chunk(
        self, index: int, text: str | None, finish: str | None, role: str | None = None
    ) -> Any:
        call = self._call
        if self._chat:
            choice = ChunkChoice(index, ChoiceDelta(text, role), finish)
            return ChatCompletionChunk(call.id, call.created, call.model, (choice,))
        return CompletionChunk(
            call.id, call.created, call.model, (CompletionChoice(index, text or "", finish),)
        )

    def _usage_chunk(self, usage: Usage) -> Any:
        call = self._call
        last_type = ChatCompletionChunk if self._chat else CompletionChunk
        return last_type(call.id, call.created, call.model, (), usage)

    def _start(self) -> list[T]:
        self._started = True
        if not self._chat:
            return []
        return [self._chunk(i, "", None, role="assistant") for i in range(self._call.n)]

    def feed(self, event: Event) -> list[T]:
        chunks = [] if self._started else self._start()
        step = self._call.adapter.step(event)
        if step.prompt_tokens is not None:
            self._prompt_tokens = step.prompt_tokens
        for choice, given, finish, count in step.choices():
            if choice >= self._call.n or self._finished[choice]:
                continue
            text = given
            if self._call.adapter.cumulative:
                text = self._new_text(choice, given, final=finish is not None)
            if self._echo[choice]:
                echo = self._echo[choice]
                cut = min(len(echo), len(text))
                if text[:cut] == echo[:cut]:
                    text, self._echo[choice] = text[cut:], echo[cut:]
                else:  # not the prompt after all: nothing more to cut
                    self._echo[choice] = ""
            if count is not None:
                self._tokens[choice] = (self._tokens[choice] or 0) + count
            if finish is not None:
                self._finished[choice] = True
            if text or finish is not None:
                chunks.append(self._chunk(choice, text, finish))
        return chunks

    def _new_text(self, choice: int, whole: str, *, final: bool) -> str:
        """The part of a cumulative text not sent yet: what lies past the length of the
        text sent. A detokenizer may rewrite its last characters (a half-decoded character
        is U+FFFD until its bytes are complete; a clean-up turns "Hello " into "Hello."),
        so what is sent stops before a trailing U+FFFD; characters rewritten after they
        were sent stay as they were sent, and the text after them still comes."""
        if not final:
            whole = whole.rstrip("\ufffd")
        sent = self._seen[choice]
        if len(whole) <= len(sent):
            return ""
        self._seen[choice] = whole
        return whole[len(sent) :]

    def finish(self) -> list[T]:
        """The chunks after the last response: finish reasons not given yet, and usage."""
        chunks = [] if self._started else self._start()
        for index, done in enumerate(self._finished):
            if not done:
                reason = self._call.adapter.inferred_finish(self._tokens[index], self._call.options)
                chunks.append(self._chunk(index, None if self._chat else "", reason))
        counted = [tokens for tokens in self._tokens if tokens is not None]
        if self._usage and (counted or self._prompt_tokens is not None):
            usage = Usage(self._prompt_tokens or 0, sum(counted))
            chunks.append(self._usage_chunk(usage))
        return chunks
