"""``triton-sdk stubgen``: write a typed module for some models of a server.

For each model the module has a result class (each output a typed property), a class
wrapping a :class:`~triton_sdk.Model` (inputs as keyword parameters) and its ``Async``
twin. The text depends only on the models' specs, so ``--check`` can compare it with a
file written earlier.
"""

from __future__ import annotations

import ast
import difflib
import keyword
import re
import unicodedata
from collections.abc import Collection, Iterable

from ._dtypes import DATATYPES
from ._result import InferResult
from ._spec import ModelSpec, TensorSpec
from .stubs import signature

__all__ = ["class_name", "class_names", "differences", "render"]

# The call's own options, after the inputs: name, declaration, and whether stream takes it.
_CALL_OPTIONS = (
    ("outputs", "Iterable[str] | None = None", True),
    ("timeout", "float | None | NotGiven = NOT_GIVEN", True),
    ("parameters", "Mapping[str, ParameterValue] | None = None", True),
    ("priority", "int = 0", False),
    ("request_id", 'str = ""', True),
    ("retry", "RetryPolicy | NotGiven | None = NOT_GIVEN", False),
    ("headers", "Mapping[str, str] | None = None", True),
    ("shared_memory", "str | NotGiven = NOT_GIVEN", False),
)

HEADER = '''"""Typed handles for Triton models, written by ``triton-sdk stubgen``: do not edit.

Regenerate with ``triton-sdk stubgen URL -m MODEL ... -o FILE``; ``--check`` tells
whether this file still matches the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_sdk import (
    NOT_GIVEN,
    AsyncResponseStream,
    InferResult,
    InputValue,
    NotGiven,
    ParameterValue,
    ResponseStream,
    RetryPolicy,
)
from triton_sdk.stubs import AsyncStubModel, StubModel, given, typed, typed_stream

__all__ = [
{names}
]
'''


def _module_names(source: str) -> frozenset[str]:
    """The names the module ``source`` binds (its imports and assignments)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return frozenset(names)


# The names the generated module binds before its classes. No class, property or
# parameter takes one (a property named ``np`` hides numpy from the annotations after it).
_MODULE_NAMES = _module_names(HEADER.format(names=""))
# What a method body uses besides those and its result class: no input may hide them.
_METHOD_NAMES = frozenset({"self", "result", "responses", *(name for name, _, _ in _CALL_OPTIONS)})
# What a result class has (InferResult's attributes, whatever they are now) and what
# its body uses: no output may override or hide them.
_RESULT_NAMES = frozenset(dir(InferResult)) | {"__slots__", "property"}


def class_name(model: str) -> str:
    """``text_embed`` -> ``TextEmbed``, ``resnet-50`` -> ``Resnet50``."""
    words = [word for word in re.split(r"[^0-9A-Za-z]+", model) if word]
    name = "".join(word[0].upper() + word[1:] for word in words) or "Model"
    if keyword.iskeyword(name):  # None, True, False
        return f"{name}_"
    return f"Model{name}" if name[0].isdigit() else name


def class_names(models: Iterable[str]) -> dict[str, str]:
    """The class name of each model in one module.

    That is :func:`class_name`, unless it (or its ``Async`` twin, or its result class) is
    another model's or a name the module imports: then, taking the models in the order
    of their names, the first keeps it and the next get ``2``, ``3``, ... (``_2`` after a
    digit): ``text-embed`` -> ``TextEmbed``, ``text_embed`` -> ``TextEmbed2``. So the
    names depend only on the set of models, not on their order.
    """
    taken = set(_MODULE_NAMES)
    chosen: dict[str, str] = {}
    for model in sorted(set(models)):
        base = class_name(model)
        name, count = base, 1
        while {name, f"Async{name}", f"{name}Result"} & taken:
            count += 1
            name = f"{base}_{count}" if base[-1].isdigit() else f"{base}{count}"
        taken |= {name, f"Async{name}", f"{name}Result"}
        chosen[model] = name
    return chosen


def _usable(text: str, reserved: Collection[str]) -> bool:
    """Whether ``text`` can name a parameter or property as it is."""
    return (
        text.isidentifier()
        and unicodedata.normalize("NFKC", text) == text  # (as Python reads an identifier)
        and not keyword.iskeyword(text)
        and not text.startswith("__")  # no dunder, nothing Python mangles in a class
        and text not in reserved
    )


def _identifier(name: str, reserved: Collection[str]) -> str:
    """A Python identifier for a tensor name (``input.1`` -> ``input_1``, ``class`` ->
    ``class_``), not yet told apart from the others' (see :func:`_identifiers`)."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(char if f"_{char}".isidentifier() else "_" for char in text)
    if unicodedata.normalize("NFKC", text) != text:  # (a combining mark now after a "_")
        text = re.sub(r"[^0-9A-Za-z_]", "_", text)
    if not text.isidentifier():  # empty, or a digit first
        text = f"_{text}"
    if text.startswith("__"):
        text = "_" + text.lstrip("_")
    if keyword.iskeyword(text) or text in reserved:
        text += "_"
    return text


def _identifiers(names: Iterable[str], reserved: Collection[str]) -> dict[str, str]:
    """Distinct Python identifiers for the tensor names of one method or result class,
    none of them ``reserved``.

    A name usable as it is keeps it; the others, in order, become :func:`_identifier`,
    with ``_2``, ``_3``, ... after it while that is taken: tensors ``a.b`` and ``a_b``
    are ``a_b_2`` and ``a_b``.
    """
    names = list(names)
    chosen = {name: name for name in names if _usable(name, reserved)}
    used = set(chosen.values())
    for name in names:
        if name in chosen:
            continue
        base = _identifier(name, reserved)
        # ("-" and "+" are both "_": the second is "_2", since "__2" is not usable.)
        stem = base if base.strip("_") else ""
        text, count = base, 1
        while text in used or not _usable(text, reserved):
            count += 1
            text = f"{stem}_{count}"
        chosen[name] = text
        used.add(text)
    return {name: chosen[name] for name in names}


def _doc(text: str) -> str:
    """``text`` as it may stand in a docstring."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


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


def _method(
    spec: ModelSpec, params: dict[str, str], method: str, result: str, asynchronous: bool
) -> list[str]:
    stream = method == "stream"
    if stream:
        returns = f"AsyncResponseStream[{result}]" if asynchronous else f"ResponseStream[{result}]"
    else:
        returns = result
    # Model.stream and AsyncModel.stream both return the stream at once: a plain def.
    prefix = "async def" if asynchronous and not stream else "def"
    lines = [f"    {prefix} {method}(", "        self,", "        *,"]
    for name, tensor in spec.inputs.items():
        default = " | None = None" if tensor.optional else ""
        lines.append(f"        {params[name]}: InputValue{default},")
    lines += [f"        {name}: {declared}," for name, declared in _options(stream)]
    lines.append(f"    ) -> {returns}:")
    model = _doc(repr(spec.name))
    what = {
        "infer": f"Run a batch through {model} (see Model.infer).",
        "infer_sample": f"Run one sample through {model}, no batch axis (see Model.infer_sample).",
        "stream": f"Send one request to {model} and read its responses (see Model.stream).",
    }[method]
    if spec.inputs:
        lines += [f'        """{what}', "", "        Args:"]
        batched = spec.batched and method != "infer_sample"
        for name, tensor in spec.inputs.items():
            lines.append(f"            {params[name]}: {_describe(tensor, batched)}.")
        lines.append('        """')
    else:  # (one line, as ruff formats it: a formatted module still matches)
        lines.append(f'        """{what}"""')
    any_optional = any(tensor.optional for tensor in spec.inputs.values())
    awaited = "await " if asynchronous and not stream else ""
    target = "responses" if stream else "result"
    lines.append(f"        {target} = {awaited}self.model.{method}(")
    indent = " " * (16 if any_optional else 12)
    entries = [f"{indent}    {_quote(name)}: {params[name]}," for name in spec.inputs]
    if any_optional:  # (laid out as ruff formats it)
        lines += ["            given(", f"{indent}{{", *entries, f"{indent}}}", "            ),"]
    elif not entries:
        lines.append(f"{indent}{{}},")
    else:
        lines += [f"{indent}{{", *entries, f"{indent}}},"]
    lines += [f"            {name}={name}," for name, _ in _options(stream)]
    lines.append("        )")
    if stream:
        lines.append(f"        return typed_stream(responses, {result})")
    else:
        lines.append(f"        return typed(result, {result})")
    return lines


def _quote(text: str) -> str:
    """A double-quoted Python string literal of ``text``: printable characters as they
    are (JSON would write one beyond U+FFFF as a surrogate pair, which Python reads as
    two other characters), others escaped."""
    return '"' + "".join(map(_literal_character, text)) + '"'


def _literal_character(character: str) -> str:
    if character in '"\\':
        return "\\" + character
    return character if character.isprintable() else ascii(character)[1:-1]


def _model(spec: ModelSpec, name: str) -> list[str]:
    result = f"{name}Result"
    model = _doc(repr(spec.name))
    lines = [
        "",
        "",
        f"class {result}(InferResult):",
        f'    """The outputs of {model}, each a typed attribute; the InferResult',
        '    surface (result["NAME"], as_numpy, ...) works too."""',
        "",
        "    __slots__ = ()",
    ]
    batched = spec.batched
    attributes = _identifiers(spec.outputs, _RESULT_NAMES | _MODULE_NAMES)
    for output, tensor in spec.outputs.items():
        lines += [
            "",
            "    @property",
            f"    def {attributes[output]}(self) -> {_array_type(tensor)}:",
            f'        """{_describe(tensor, batched)}."""',
            f"        return self[{_quote(output)}]",
        ]
    # Parameters hide module names only in the body, which uses these and the result class.
    used = _METHOD_NAMES | {"given", "typed", "typed_stream", result}
    params = _identifiers(spec.inputs, used)
    methods = ["stream"] if spec.decoupled else ["infer", "infer_sample"]
    for asynchronous in (False, True):
        base = "AsyncStubModel" if asynchronous else "StubModel"
        handle = "AsyncModel" if asynchronous else "Model"
        cls = f"Async{name}" if asynchronous else name
        handle_call = f"{'await ' if asynchronous else ''}client.model({spec.name!r})"
        wrapped = _doc(f"{cls}({handle_call})")
        lines += [
            "",
            "",
            f"class {cls}({base}):",
            f'    """Model {model}, typed: ``{wrapped}``',
            f'    wraps the ts.{handle} and refuses one whose spec has changed."""',
            "",
            f"    MODEL = {_quote(spec.name)}",
            f"    SIGNATURE = {_quote(signature(spec))}",
        ]
        for method in methods:
            lines += ["", *_method(spec, params, method, result, asynchronous)]
    return lines


def render(specs: Iterable[ModelSpec]) -> str:
    """The module for ``specs``, in the order given (a model given twice, once)."""
    unique: dict[str, ModelSpec] = {}
    for spec in specs:
        unique.setdefault(spec.name, spec)
    names = class_names(unique)
    exported: list[str] = []
    body: list[str] = []
    for spec in unique.values():
        name = names[spec.name]
        exported += [name, f"Async{name}", f"{name}Result"]
        body += _model(spec, name)
    listed = "\n".join(f"    {_quote(name)}," for name in sorted(exported))
    return HEADER.format(names=listed) + "\n".join(body) + "\n"


def same_code(written: str, now: str) -> bool:
    """Whether a file written earlier holds the code stubgen writes now: the same text,
    or the same syntax tree laid out otherwise (a formatter wraps long lines its own
    way; comments aside, the code is unchanged)."""
    if written == now:
        return True
    try:
        return ast.dump(ast.parse(written)) == ast.dump(ast.parse(now))
    except (SyntaxError, ValueError):
        return False


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
