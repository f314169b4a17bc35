"""``triton-sdk stubgen``: write a typed module for some models of a server.

For each model the module has a result class (each output a typed property), a class
wrapping a :class:`~triton_sdk.Model` (inputs as keyword parameters) and its ``Async``
twin. The text depends only on the models' specs, so ``--check`` can compare it with a
file written earlier.
"""

from __future__ import annotations

import difflib
import json
import keyword
import re
from collections.abc import Iterable

from ._dtypes import DATATYPES
from ._spec import ModelSpec, TensorSpec
from .stubs import signature

__all__ = ["class_name", "differences", "render"]

# The call's own options, after the inputs: name, declaration, and whether stream takes it.
_CALL_OPTIONS = (
    ("outputs", "Iterable[str] | None = None", True),
    ("timeout", "float | None | NotGiven = NOT_GIVEN", True),
    ("parameters", "Mapping[str, ParameterValue] | None = None", True),
    ("priority", "int = 0", False),
    ("request_id", 'str = ""', True),
    ("retry", "RetryPolicy | NotGiven = NOT_GIVEN", False),
    ("headers", "Mapping[str, str] | None = None", True),
    ("shared_memory", "str | NotGiven = NOT_GIVEN", False),
)


# Names a method of the generated classes already uses, and attributes of InferResult.
_OPTIONS = frozenset({"self", "inputs", *(name for name, _, _ in _CALL_OPTIONS)})
_RESULT_ATTRIBUTES = frozenset(dir(dict)) | {
    "as_numpy",
    "as_strings",
    "classification",
    "concatenate",
    "id",
    "model_name",
    "model_version",
    "parameters",
    "to_dict",
    "without_batch_axis",
}


def class_name(model: str) -> str:
    """``text_embed`` -> ``TextEmbed``, ``resnet-50`` -> ``Resnet50``."""
    words = [word for word in re.split(r"[^0-9A-Za-z]+", model) if word]
    name = "".join(word[0].upper() + word[1:] for word in words) or "Model"
    return f"Model{name}" if name[0].isdigit() else name


def _identifier(name: str, taken: frozenset[str]) -> str:
    """A Python identifier for a tensor name (``input.1`` -> ``input_1``)."""
    text = re.sub(r"\W", "_", name)
    if not text or text[0].isdigit():
        text = f"_{text}"
    if keyword.iskeyword(text) or text in taken:
        text += "_"
    return text


def _array_type(tensor: TensorSpec) -> str:
    if tensor.datatype == "BYTES":
        return "npt.NDArray[np.object_]"
    dtype = DATATYPES.get(tensor.datatype)
    if dtype is None or dtype.name == "bfloat16":
        return "npt.NDArray[Any]"
    return "npt.NDArray[np.bool_]" if dtype.name == "bool" else f"npt.NDArray[np.{dtype.name}]"


def _describe(tensor: TensorSpec, batched: bool) -> str:
    axis = "; batch axis first" if batched else ""
    optional = ", optional" if tensor.optional else ""
    return f"{tensor.datatype} {list(tensor.shape)} per sample{axis}{optional}"


def _options(stream: bool) -> list[tuple[str, str]]:
    return [(name, declared) for name, declared, streams in _CALL_OPTIONS if streams or not stream]


def _method(spec: ModelSpec, method: str, result: str, asynchronous: bool) -> list[str]:
    stream = method == "stream"
    params = {name: _identifier(name, _OPTIONS) for name in spec.inputs}
    returns = f"AsyncIterator[{result}]" if stream and asynchronous else result
    if stream and not asynchronous:
        returns = f"Iterator[{result}]"
    prefix = "async def" if asynchronous else "def"
    lines = [f"    {prefix} {method}(", "        self,", "        *,"]
    for name, tensor in spec.inputs.items():
        default = " | None = None" if tensor.optional else ""
        lines.append(f"        {params[name]}: InputValue{default},")
    lines += [f"        {name}: {declared}," for name, declared in _options(stream)]
    lines.append(f"    ) -> {returns}:")
    what = {
        "infer": f"Run a batch through {spec.name!r} (see Model.infer).",
        "infer_sample": f"Run one sample through {spec.name!r}, no batch axis "
        "(see Model.infer_sample).",
        "stream": f"Send one request to {spec.name!r} and read its responses (see Model.stream).",
    }[method]
    lines.append(f'        """{what}')
    if spec.inputs:
        lines += ["", "        Args:"]
        batched = spec.batched and method != "infer_sample"
        for name, tensor in spec.inputs.items():
            lines.append(f"            {params[name]}: {_describe(tensor, batched)}.")
    lines.append('        """')
    any_optional = any(tensor.optional for tensor in spec.inputs.values())
    awaited = "await " if asynchronous and not stream else ""
    target = "responses" if stream else "result"
    lines.append(f"        {target} = {awaited}self.model.{method}(")
    indent = " " * (16 if any_optional else 12)
    entries = [f"{indent}    {_quote(name)}: {params[name]}," for name in spec.inputs]
    if any_optional:  # (laid out as ruff formats it)
        lines += ["            given(", f"{indent}{{", *entries, f"{indent}}}", "            ),"]
    else:
        lines += [f"{indent}{{", *entries, f"{indent}}},"]
    lines += [f"            {name}={name}," for name, _ in _options(stream)]
    lines.append("        )")
    if stream:
        loop = "async for" if asynchronous else "for"
        lines += [
            f"        {loop} response in responses:",
            f"            yield typed(response, {result})",
        ]
    else:
        lines.append(f"        return typed(result, {result})")
    return lines


def _quote(text: str) -> str:
    """A double-quoted Python string literal."""
    return json.dumps(text)


def _model(spec: ModelSpec) -> list[str]:
    name = class_name(spec.name)
    result = f"{name}Result"
    lines = [
        "",
        "",
        f"class {result}(InferResult):",
        f'    """The outputs of {spec.name!r}, each a typed attribute; the InferResult',
        '    surface (result["NAME"], as_numpy, ...) works too."""',
        "",
        "    __slots__ = ()",
    ]
    batched = spec.batched
    for output, tensor in spec.outputs.items():
        attribute = _identifier(output, _RESULT_ATTRIBUTES)
        lines += [
            "",
            "    @property",
            f"    def {attribute}(self) -> {_array_type(tensor)}:",
            f'        """{_describe(tensor, batched)}."""',
            f"        return self[{_quote(output)}]",
        ]
    methods = ["stream"] if spec.decoupled else ["infer", "infer_sample"]
    for asynchronous in (False, True):
        base = "AsyncStubModel" if asynchronous else "StubModel"
        handle = "AsyncModel" if asynchronous else "Model"
        cls = f"Async{name}" if asynchronous else name
        lines += [
            "",
            "",
            f"class {cls}({base}):",
            f'    """Model {spec.name!r}, typed: ``{cls}(client.model({spec.name!r}))``',
            f'    wraps the ts.{handle} and refuses one whose spec has changed."""',
            "",
            f"    MODEL = {_quote(spec.name)}",
            f"    SIGNATURE = {_quote(signature(spec))}",
        ]
        for method in methods:
            lines += ["", *_method(spec, method, result, asynchronous)]
    return lines


HEADER = '''"""Typed handles for Triton models, written by ``triton-sdk stubgen``: do not edit.

Regenerate with ``triton-sdk stubgen URL -m MODEL ... -o FILE``; ``--check`` tells
whether this file still matches the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_sdk import NOT_GIVEN, InferResult, InputValue, NotGiven, ParameterValue, RetryPolicy
from triton_sdk.stubs import AsyncStubModel, StubModel, given, typed

__all__ = [
{names}
]
'''


def render(specs: Iterable[ModelSpec]) -> str:
    """The module for ``specs``, in the order given."""
    specs = list(specs)
    names = []
    for spec in specs:
        name = class_name(spec.name)
        names += [name, f"Async{name}", f"{name}Result"]
    body: list[str] = []
    for spec in specs:
        body += _model(spec)
    exported = "\n".join(f"    {_quote(name)}," for name in sorted(names))
    return HEADER.format(names=exported) + "\n".join(body) + "\n"


def differences(written: str, now: str, path: str) -> str:
    """What differs between a file written earlier and what stubgen writes now."""
    changed = []
    for line in difflib.unified_diff(
        written.splitlines(), now.splitlines(), f"{path} (on disk)", f"{path} (now)", lineterm=""
    ):
        changed.append(line)
    shown = changed[:60]
    if len(changed) > len(shown):
        shown.append(f"... {len(changed) - len(shown)} more lines")
    return "\n".join(shown)
