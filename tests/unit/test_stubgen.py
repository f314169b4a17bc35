"""Typed per-model stubs: the module stubgen writes, the checks its classes make, and what
mypy --strict says of code that uses them. Against a real server: tests/integration."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import sys
import textwrap
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._stubgen import class_name, class_names, differences, render, same_code
from triton_sdk.stubs import signature, typed
from triton_sdk.testing import MockTransport

from .._reader import StreamReader


def tensor(name: str, datatype: str, shape: tuple[int, ...], optional: bool = False) -> Any:
    return ts.TensorSpec(name=name, datatype=datatype, shape=shape, optional=optional)


SIMPLE = ts.ModelSpec(
    name="simple",
    max_batch_size=8,
    inputs={"INPUT0": tensor("INPUT0", "INT32", (16,)), "INPUT1": tensor("INPUT1", "INT32", (16,))},
    outputs={
        "OUTPUT0": tensor("OUTPUT0", "INT32", (16,)),
        "OUTPUT1": tensor("OUTPUT1", "INT32", (16,)),
    },
)
# Names that are no Python identifiers, keywords, the methods' own options, result attributes.
ODD = ts.ModelSpec(
    name="odd-model.v2",
    inputs={
        "input.1": tensor("input.1", "FP32", (-1,)),
        "class": tensor("class", "BOOL", (1,)),
        "timeout": tensor("timeout", "BYTES", (1,), optional=True),
    },
    outputs={"id": tensor("id", "INT64", (1,)), "9lives": tensor("9lives", "BF16", (2,))},
)
STREAMED = ts.ModelSpec(
    name="repeat",
    decoupled=True,
    inputs={"IN": tensor("IN", "INT32", (-1,))},
    outputs={"OUT": tensor("OUT", "INT32", (1,))},
)


def load(text: str, folder: Path, name: str = "models") -> ModuleType:
    path = folder / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("simple", "Simple"),
        ("text_embed", "TextEmbed"),
        ("resnet-50", "Resnet50"),
        ("odd-model.v2", "OddModelV2"),
        ("3d_unet", "Model3dUnet"),
        ("BERT", "BERT"),
        ("none", "None_"),  # a keyword is no class name
        ("true", "True_"),
    ],
)
def test_class_names(model: str, expected: str) -> None:
    assert class_name(model) == expected


def test_a_sequence_model_s_signature_says_so() -> None:
    # A model that gained sequence batching kept its signature: the stub's check passed,
    # and its infer() could only fail.
    stateful = attrs.evolve(SIMPLE, sequence=True)
    assert "sequences" in signature(stateful)
    assert signature(stateful) != signature(SIMPLE)


def test_the_module_has_a_result_a_handle_and_an_async_twin_per_model(tmp_path: Path) -> None:
    module = load(render([SIMPLE, ODD, STREAMED]), tmp_path)
    for name in ("Simple", "AsyncSimple", "SimpleResult", "OddModelV2", "RepeatResult"):
        assert name in module.__all__
    assert module.Simple.MODEL == "simple"
    assert signature(SIMPLE) == module.Simple.SIGNATURE
    assert hasattr(module.Simple, "infer")
    assert hasattr(module.Simple, "infer_sample")
    assert not hasattr(module.Repeat, "infer")  # decoupled: stream only
    assert hasattr(module.AsyncRepeat, "stream")


def test_odd_names_become_identifiers(tmp_path: Path) -> None:
    module = load(render([ODD]), tmp_path)
    parameters = inspect.signature(module.OddModelV2.infer).parameters
    assert {"input_1", "class_", "timeout_"} <= set(parameters)
    assert parameters["timeout_"].default is None  # optional input
    assert parameters["timeout"].default is ts.NOT_GIVEN  # the call's own option
    assert isinstance(inspect.getattr_static(module.OddModelV2Result, "id_"), property)
    assert isinstance(inspect.getattr_static(module.OddModelV2Result, "_9lives"), property)


def echo(op: Any, ctx: ts.CallContext) -> object:
    """Each output is the input of the same name (streamed: one response)."""
    request = op.request if isinstance(op, ops.StreamInfer) else op
    assert isinstance(request, ops.InferRequest)
    outputs = {tensor.name: tensor.array for tensor in request.inputs}
    if isinstance(op, ops.StreamInfer):
        return [ts.testing.result_of(request.model, outputs)]
    return outputs


def class_of(text: str, name: str) -> ast.ClassDef:
    return next(
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.ClassDef) and node.name == name
    )


def sent_as(text: str, cls: str) -> dict[str, str]:
    """Tensor name -> the parameter it is sent from, in the methods of class ``cls`` of a
    generated module (the same in each)."""
    tables = [node for node in ast.walk(class_of(text, cls)) if isinstance(node, ast.Dict)]
    mappings = [
        {
            ast.literal_eval(key): value.id  # type: ignore[arg-type, attr-defined]
            for key, value in zip(table.keys, table.values, strict=True)
        }
        for table in tables
    ]
    assert mappings
    assert all(mapping == mappings[0] for mapping in mappings)
    return mappings[0]


def read_as(text: str, cls: str) -> dict[str, str]:
    """Tensor name -> the property of result class ``cls`` of a generated module."""
    return {
        ast.literal_eval(node.body[-1].value.slice): node.name  # type: ignore[attr-defined]
        for node in class_of(text, cls).body
        if isinstance(node, ast.FunctionDef)
    }


DUPES = ts.ModelSpec(
    name="dupes",
    inputs={name: tensor(name, "FP32", (1,)) for name in ("a.b", "a_b", "a-b", "a_b_2")},
    outputs={name: tensor(name, "FP32", (1,)) for name in ("y.1", "y_1", "y 1")},
)


def test_names_that_become_the_same_identifier_stay_apart(
    tmp_path: Path, mypy_says: dict[str, list[str]]
) -> None:
    text = render([DUPES])
    module = load(text, tmp_path)  # (two parameters of one name were a SyntaxError)
    # A name usable as it is keeps it; the others, in order, get _2, _3, ... past it.
    assert sent_as(text, "Dupes") == {
        "a.b": "a_b_3",
        "a_b": "a_b",
        "a-b": "a_b_4",
        "a_b_2": "a_b_2",
    }
    assert read_as(text, "DupesResult") == {"y.1": "y_1_2", "y_1": "y_1", "y 1": "y_1_3"}
    mock = MockTransport(echo, models=[DUPES])
    with ts.Client("grpc://test", transport=mock) as client:
        dupes = module.Dupes(client.model("dupes"))
        dupes.infer(a_b_3=[1.0], a_b=[2.0], a_b_4=[3.0], a_b_2=[4.0])
    (sent,) = [call.op for call in mock.calls if isinstance(call.op, ops.InferRequest)]
    got = {tensor.name: float(tensor.array[0]) for tensor in sent.inputs}
    assert got == {"a.b": 1.0, "a_b": 2.0, "a-b": 3.0, "a_b_2": 4.0}
    echoed = ts.testing.result_of("dupes", {"y.1": [1.0], "y_1": [2.0], "y 1": [3.0]})
    result = typed(echoed, module.DupesResult)
    assert (result.y_1_2[0], result.y_1[0], result.y_1_3[0]) == (1.0, 2.0, 3.0)
    assert mypy_says["dupes"] == []


SIGNS = ts.ModelSpec(
    name="signs",
    inputs={name: tensor(name, "FP32", (1,)) for name in ("-", "+", "_2")},
    outputs={name: tensor(name, "FP32", (1,)) for name in ("+", "-", "*")},
)


def test_names_of_punctuation_alone_become_underscore_and_numbers(tmp_path: Path) -> None:
    text = render([SIGNS])  # (looked for an identifier for ever)
    load(text, tmp_path)
    assert sent_as(text, "Signs") == {"-": "_", "+": "_3", "_2": "_2"}
    assert read_as(text, "SignsResult") == {"+": "_", "-": "_2", "*": "_3"}


# Inputs named like the helpers a method calls, outputs named like InferResult's methods.
HELPERS = ts.ModelSpec(
    name="helpers",
    inputs={
        "given": tensor("given", "BYTES", (1,)),
        "typed": tensor("typed", "FP32", (1,)),
        "OPT": tensor("OPT", "FP32", (1,), optional=True),
    },
    outputs={name: tensor(name, "BYTES", (1,)) for name in ("datatype", "nbytes", "split_rows")},
)


def test_tensors_named_like_what_the_module_uses_hide_nothing(
    tmp_path: Path, mypy_says: dict[str, list[str]]
) -> None:
    text = render([HELPERS])
    assert sent_as(text, "Helpers") == {"given": "given_", "typed": "typed_", "OPT": "OPT"}
    assert read_as(text, "HelpersResult") == {
        "datatype": "datatype_",
        "nbytes": "nbytes_",
        "split_rows": "split_rows_",
    }
    module = load(text, tmp_path)

    def serve(op: Any, ctx: ts.CallContext) -> object:
        assert isinstance(op, ops.InferRequest)
        assert {tensor.name for tensor in op.inputs} == {"given", "typed"}  # OPT: not given
        return {"datatype": ["a"], "nbytes": ["b"], "split_rows": ["c"]}

    with ts.Client("grpc://test", transport=MockTransport(serve, models=[HELPERS])) as client:
        result = module.Helpers(client.model("helpers")).infer(given_=["x"], typed_=[1.0])
    assert result.as_strings("datatype").tolist() == ["a"]  # datatype is InferResult's
    assert result.datatype("nbytes") == "BYTES"
    assert result.datatype_.tolist() == [b"a"]  # (text arrives as bytes, as from a server)
    assert result.split_rows_.tolist() == [b"c"]
    assert mypy_says["helpers"] == []


def names_a_module_uses() -> list[str]:
    """Every name a generated module binds or uses (imports, helpers, locals, the call's
    options, its own classes), InferResult's attributes, and names Python treats apart:
    as tensor names, each a trap for the generated code."""
    seed = [
        ts.ModelSpec(
            name=name,
            decoupled=decoupled,
            inputs={"X": tensor("X", "FP32", (1,), optional=True)},
            outputs={"Y": tensor("Y", "FP32", (1,))},
        )
        for name, decoupled in (("weird", False), ("weird_stream", True))
    ]
    tree = ast.parse(render(seed))
    names = set(dir(ts.InferResult)) | {"__debug__", "__x", "_Weird__x", "_x"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    assert {"given", "typed", "typed_stream", "result", "responses", "np", "property"} <= names
    return sorted(names - {"X", "Y"})


NAMES = names_a_module_uses()
WEIRD, WEIRD_STREAM = (
    ts.ModelSpec(
        name=name,
        decoupled=decoupled,
        inputs={
            name: tensor(name, "FP32", (1,), optional=index % 2 == 1)
            for index, name in enumerate(NAMES)
        },
        outputs={name: tensor(name, "FP32", (1,)) for name in NAMES},
    )
    for name, decoupled in (("weird", False), ("weird_stream", True))
)


def test_no_tensor_name_hides_what_the_module_uses(
    tmp_path: Path, mypy_says: dict[str, list[str]]
) -> None:
    text = render([WEIRD, WEIRD_STREAM])
    module = load(text, tmp_path)
    values = {name: [float(index)] for index, name in enumerate(NAMES)}

    def check(result: Any, cls: str) -> None:
        assert type(result).__name__ == cls
        for name, attribute in read_as(text, cls).items():
            assert getattr(result, attribute).tolist() == values[name], name
        # InferResult's own surface is intact (outputs named like it were properties).
        assert result.datatype("datatype") == "FP32"
        assert result.as_numpy("nbytes").tolist() == values["nbytes"]
        assert result.nbytes == 4 * len(NAMES)
        assert set(result.to_dict()) == set(NAMES)

    mock = MockTransport(echo, models=[WEIRD, WEIRD_STREAM])
    sent = sent_as(text, "Weird")
    assert sent["given"] == "given_"  # (the helper the method calls for optional inputs)
    streamed = sent_as(text, "WeirdStream")
    with ts.Client("grpc://test", transport=mock) as client:
        weird = module.Weird(client.model("weird"))
        arguments = {sent[name]: value for name, value in values.items()}
        check(weird.infer(**arguments), "WeirdResult")
        check(weird.infer_sample(**arguments), "WeirdResult")
        stream = module.WeirdStream(client.model("weird_stream"))
        with stream.stream(**{streamed[name]: value for name, value in values.items()}) as got:
            (response,) = list(got)
        check(response, "WeirdStreamResult")

    async def twins() -> None:
        mock = MockTransport(echo, models=[WEIRD, WEIRD_STREAM])
        async with ts.AsyncClient("grpc://test", transport=mock) as client:
            weird = module.AsyncWeird(await client.model("weird"))
            check(await weird.infer(**arguments), "WeirdResult")
            stream = module.AsyncWeirdStream(await client.model("weird_stream"))
            responses = stream.stream(**{streamed[name]: value for name, value in values.items()})
            check(await anext(responses), "WeirdStreamResult")
            await responses.aclose()

    asyncio.run(twins())
    assert mypy_says["weird"] == []


def named(*models: str) -> list[ts.ModelSpec]:
    return [
        ts.ModelSpec(
            name=model,
            inputs={"X": tensor("X", "FP32", (1,))},
            outputs={"X": tensor("X", "FP32", (1,))},
        )
        for model in models
    ]


COLLIDING = named("text_embed", "text-embed", "infer", "resnet-50", "resnet_50", "embed")
COLLIDING += named("async_embed", "embed_result", "stub_model")


def test_models_of_one_class_name_are_told_apart(
    tmp_path: Path, mypy_says: dict[str, list[str]]
) -> None:
    # In the order of the models' names, the first keeps the name, the next get 2, 3, ...
    # (_2 after a digit); a name the module imports, or one of another model's three
    # classes, is taken too.
    assert class_names(spec.name for spec in COLLIDING) == {
        "async_embed": "AsyncEmbed",
        "embed": "Embed2",  # (AsyncEmbed is async_embed's)
        "embed_result": "EmbedResult2",  # (AsyncEmbedResult is async_embed's result class)
        "infer": "Infer2",  # (InferResult is imported)
        "resnet-50": "Resnet50",
        "resnet_50": "Resnet50_2",
        "stub_model": "StubModel2",
        "text-embed": "TextEmbed",
        "text_embed": "TextEmbed2",
    }
    text = render(COLLIDING)
    assert render(reversed(COLLIDING)) != text  # the models' order is kept
    assert class_names(spec.name for spec in reversed(COLLIDING)) == class_names(
        spec.name for spec in COLLIDING
    )
    module = load(text, tmp_path)
    assert module.InferResult is ts.InferResult
    assert module.StubModel is ts.stubs.StubModel
    assert len(module.__all__) == 3 * len(COLLIDING)
    assert module.TextEmbed.MODEL == "text-embed"
    assert module.TextEmbed2.MODEL == "text_embed"
    assert module.AsyncTextEmbed2.MODEL == "text_embed"
    assert module.Infer2.MODEL == "infer"
    mock = MockTransport(echo, models=COLLIDING)
    with ts.Client("grpc://test", transport=mock) as client:
        assert module.TextEmbed2(client.model("text_embed")).infer(X=[1.0]).X.tolist() == [1.0]
        with pytest.raises(ts.InvalidInputError, match="is for model 'text-embed'"):
            module.TextEmbed(client.model("text_embed"))
        result = module.Infer2(client.model("infer")).infer(X=[2.0])
        assert type(result) is module.Infer2Result
    assert mypy_says["collide"] == []


def test_a_model_given_twice_is_written_once() -> None:
    assert render([SIMPLE, STREAMED, SIMPLE]) == render([SIMPLE, STREAMED])


def serve_stream(op: Any, ctx: ts.CallContext) -> object:
    assert isinstance(op, ops.StreamInfer)
    values = op.request.inputs[0].array
    return [ts.testing.result_of("repeat", {"OUT": [value]}) for value in values]


def test_a_stream_is_a_response_stream_of_typed_results(tmp_path: Path) -> None:
    module = load(render([STREAMED]), tmp_path)
    mock = MockTransport(serve_stream, models=[STREAMED])
    with ts.Client("grpc://test", transport=mock) as client:
        repeat = module.Repeat(client.model("repeat"))
        before = len(mock.calls)
        with pytest.raises(ts.InvalidInputError, match="'IN'"):
            repeat.stream(IN=["x"])  # refused at the call, as Model.stream does
        assert len(mock.calls) == before
        with repeat.stream(IN=[5, 6, 7]) as responses:
            assert isinstance(responses, ts.ResponseStream)
            first = next(responses)
            assert type(first) is module.RepeatResult
            assert first.OUT.tolist() == [5]
        assert list(responses) == []  # left: closed
        assert [response.OUT.tolist() for response in repeat.stream(IN=[1, 2])] == [[1], [2]]
        responses = repeat.stream(IN=[1, 2])
        responses.close()
        responses.close()
        assert list(responses) == []


def test_a_stream_closes_from_another_thread_while_it_is_read(tmp_path: Path) -> None:
    module = load(render([STREAMED]), tmp_path)
    release = threading.Event()

    def slow(op: Any, ctx: ts.CallContext) -> object:
        def responses() -> Any:
            yield ts.testing.result_of("repeat", {"OUT": [1]})
            release.wait(10)
            yield ts.testing.result_of("repeat", {"OUT": [2]})

        return responses()

    with ts.Client("grpc://test", transport=MockTransport(slow, models=[STREAMED])) as client:
        responses = module.Repeat(client.model("repeat")).stream(IN=[1, 2])
        reader = StreamReader(responses)
        reader.wait_until_waiting()
        try:
            responses.close()  # while the reader waits: no "generator already executing"
        finally:
            release.set()
        reader.join(5)
        assert reader.outcome == ["ended"]
        assert all(type(seen).__name__ == "RepeatResult" for seen in reader.seen)


async def test_an_async_stream_is_an_async_response_stream_of_typed_results(
    tmp_path: Path,
) -> None:
    module = load(render([STREAMED]), tmp_path)
    mock = MockTransport(serve_stream, models=[STREAMED])
    async with ts.AsyncClient("grpc://test", transport=mock) as client:
        repeat = module.AsyncRepeat(await client.model("repeat"))
        with pytest.raises(ts.InvalidInputError, match="'IN'"):
            repeat.stream(IN=["x"])  # refused at the call, before any iteration
        async with repeat.stream(IN=[5, 6]) as responses:
            assert isinstance(responses, ts.AsyncResponseStream)
            first = await anext(responses)
            assert type(first) is module.RepeatResult
            assert first.OUT.tolist() == [5]
        assert [response async for response in responses] == []
        got = [response.OUT.tolist() async for response in repeat.stream(IN=[1, 2])]
        assert got == [[1], [2]]


def test_rendering_depends_only_on_the_specs() -> None:
    assert render([SIMPLE, ODD]) == render([SIMPLE, ODD])
    changed = ts.ModelSpec(name="simple", max_batch_size=8, inputs=dict(SIMPLE.inputs), outputs={})
    diff = differences(render([SIMPLE]), render([changed]), "models.py")
    assert "models.py (on disk)" in diff
    assert "-    def OUTPUT0(self)" in diff


def serve(op: Any, ctx: ts.CallContext) -> object:
    assert isinstance(op, ops.InferRequest)
    given = {tensor.name: tensor.array for tensor in op.inputs}
    return {
        "OUTPUT0": given["INPUT0"] + given["INPUT1"],
        "OUTPUT1": given["INPUT0"] - given["INPUT1"],
    }


def test_a_stub_runs_the_model_and_types_its_result(tmp_path: Path) -> None:
    module = load(render([SIMPLE]), tmp_path)
    with ts.Client("grpc://test", transport=MockTransport(serve, models=[SIMPLE])) as client:
        simple = module.Simple(client.model("simple"))
        ones = np.ones((2, 16), dtype=np.int32)
        result = simple.infer(INPUT0=ones, INPUT1=ones)
        assert isinstance(result, ts.InferResult)
        assert type(result).__name__ == "SimpleResult"
        assert np.array_equal(result.OUTPUT0, 2 * ones)
        assert np.array_equal(result["OUTPUT1"], 0 * ones)
        sample = simple.infer_sample(INPUT0=ones[0], INPUT1=ones[0])
        assert sample.OUTPUT0.shape == (16,)


async def test_the_async_twin_wraps_an_async_model(tmp_path: Path) -> None:
    module = load(render([SIMPLE]), tmp_path)
    mock = MockTransport(serve, models=[SIMPLE])
    async with ts.AsyncClient("grpc://test", transport=mock) as client:
        simple = module.AsyncSimple(await client.model("simple"))
        ones = np.ones((1, 16), dtype=np.int32)
        assert np.array_equal((await simple.infer(INPUT0=ones, INPUT1=ones)).OUTPUT0, 2 * ones)
        with pytest.raises(ts.InvalidInputError, match=r"wraps a ts\.AsyncModel"):
            module.AsyncSimple(object())


def test_names_beyond_the_basic_plane_and_keyword_models_round_trip(tmp_path: Path) -> None:
    # JSON wrote U+1F600 as a surrogate pair, which Python source reads as two other
    # characters: the stub then refused the very model it was made from.
    name = "X\N{GRINNING FACE}\t"  # (the test's model echoes: one name in and out)
    spec = ts.ModelSpec(
        name="none\N{GRINNING FACE}",
        max_batch_size=4,
        inputs={name: tensor(name, "FP32", (1,))},
        outputs={name: tensor(name, "FP32", (1,))},
    )
    module = load(render([spec]), tmp_path)
    assert spec.name == module.None_.MODEL
    assert signature(spec) == module.None_.SIGNATURE
    with ts.Client("grpc://test", transport=MockTransport(echo, models=[spec])) as client:
        stub = module.None_(client.model(spec.name))
        result = stub.infer(X__=[[1.0]])
        assert result[name].tolist() == result.X__.tolist() == [[1.0]]


def test_a_model_without_inputs_is_laid_out_as_ruff_formats_it(tmp_path: Path) -> None:
    # ruff format joins a docstring's closing quotes to a lone line, and {\n} to {}: the
    # docstring is code, so --check then failed on a formatted file of an unchanged model.
    spec = ts.ModelSpec(name="clock", inputs={}, outputs={"NOW": tensor("NOW", "INT64", (1,))})
    text = render([spec])
    load(text, tmp_path)
    assert '        """Run a batch through \'clock\' (see Model.infer)."""\n' in text
    assert "            {},\n" in text
    assert "            {\n            }," not in text


def test_check_compares_code_not_layout() -> None:
    # An ONNX export's long names: a project's formatter wraps the lines stubgen writes
    # (and --check then failed on a file whose code had not changed).
    name = "/model/encoder/layer.11/attention/output/LayerNorm/Add_output_0"
    spec = ts.ModelSpec(
        name="bert",
        max_batch_size=8,
        inputs={"input_ids": tensor("input_ids", "INT64", (-1,))},
        outputs={name: tensor(name, "FP32", (-1, 768))},
    )
    text = render([spec])
    long_line = next(line for line in text.splitlines() if line.startswith("    def _model_"))
    wrapped = long_line.replace("(self)", "(\n        self,\n    )")
    relaid = text.replace(long_line, wrapped).replace('"""\n\nfrom', '"""\n\n# ours\nfrom', 1)
    assert relaid != text
    assert same_code(relaid, text)
    assert not same_code(text.replace("[-1, 768]", "[-1, 1024]"), text)
    assert not same_code("def broken(:", text)


def test_a_stub_refuses_another_model_or_a_changed_spec(tmp_path: Path) -> None:
    module = load(render([SIMPLE]), tmp_path)
    changed = ts.ModelSpec(
        name="simple",
        max_batch_size=8,
        inputs={"INPUT0": tensor("INPUT0", "FP32", (16,)), "INPUT1": SIMPLE.inputs["INPUT1"]},
        outputs=dict(SIMPLE.outputs),
    )
    other = ts.ModelSpec(name="other", inputs={}, outputs={})
    with ts.Client(
        "grpc://test", transport=MockTransport(serve, models=[changed, other])
    ) as client:
        with pytest.raises(ts.InvalidInputError) as info:
            module.Simple(client.model("simple"))
        assert "now: input INPUT0 FP32 [16]" in str(info.value)
        assert "was: input INPUT0 INT32 [16]" in str(info.value)
        assert "stubgen" in str(info.value)
        with pytest.raises(ts.InvalidInputError, match="is for model 'simple', got 'other'"):
            module.Simple(client.model("other"))


def test_a_stub_refuses_a_spec_of_the_same_tensors_in_another_order(tmp_path: Path) -> None:
    # (Names made unique by a suffix follow the order; the message named no change.)
    module = load(render([SIMPLE]), tmp_path)
    reordered = ts.ModelSpec(
        name="simple",
        max_batch_size=8,
        inputs={"INPUT1": SIMPLE.inputs["INPUT1"], "INPUT0": SIMPLE.inputs["INPUT0"]},
        outputs=dict(SIMPLE.outputs),
    )
    transport = MockTransport(serve, models=[reordered])
    with (
        ts.Client("grpc://test", transport=transport) as client,
        pytest.raises(ts.InvalidInputError, match="the same tensors in another order") as info,
    ):
        module.Simple(client.model("simple"))
    now, was = str(info.value).split("; was: ")
    assert "input INPUT1 INT32 [16]; input INPUT0 INT32 [16]" in now
    assert "input INPUT0 INT32 [16]; input INPUT1 INT32 [16]" in was


def test_the_async_twin_shows_how_it_is_made(tmp_path: Path) -> None:
    module = load(render([SIMPLE]), tmp_path)
    assert "AsyncSimple(await client.model('simple'))" in (module.AsyncSimple.__doc__ or "")
    assert "``Simple(client.model('simple'))``" in (module.Simple.__doc__ or "")


# What mypy --strict says of code using a generated module

USES = {
    "good": """
        import numpy as np
        import numpy.typing as npt
        import triton_sdk as ts
        import models

        def run(client: ts.Client) -> npt.NDArray[np.int32]:
            simple = models.Simple(client.model("simple"))
            result = simple.infer(INPUT0=[[1] * 16], INPUT1=[[2] * 16], timeout=5.0)
            out: npt.NDArray[np.int32] = result.OUTPUT0
            return out + result["OUTPUT1"]

        async def arun(client: ts.AsyncClient) -> npt.NDArray[np.int32]:
            simple = models.AsyncSimple(await client.model("simple"))
            return (await simple.infer_sample(INPUT0=[1] * 16, INPUT1=[2] * 16)).OUTPUT1

        def stream(client: ts.Client) -> list[npt.NDArray[np.int32]]:
            repeat = models.Repeat(client.model("repeat"))
            with repeat.stream(IN=[1, 2], timeout=5.0) as responses:
                typed: ts.ResponseStream[models.RepeatResult] = responses
                return [response.OUT for response in typed]

        async def astream(client: ts.AsyncClient) -> list[npt.NDArray[np.int32]]:
            repeat = models.AsyncRepeat(await client.model("repeat"))
            async with repeat.stream(IN=[1, 2]) as responses:
                typed: ts.AsyncResponseStream[models.RepeatResult] = responses
                return [response.OUT async for response in typed]
        """,
    "typo": """
        import triton_sdk as ts
        import models

        def run(client: ts.Client) -> None:
            models.Simple(client.model("simple")).infer(INPUTO=[1], INPUT1=[2])
        """,
    "missing": """
        import triton_sdk as ts
        import models

        def run(client: ts.Client) -> None:
            models.Simple(client.model("simple")).infer(INPUT0=[1])
        """,
    "output": """
        import triton_sdk as ts
        import models

        def run(client: ts.Client) -> None:
            print(models.Simple(client.model("simple")).infer(INPUT0=[1], INPUT1=[2]).OUTPUTO)
        """,
    "streamed": """
        import triton_sdk as ts
        import models

        def run(client: ts.Client) -> None:
            for response in models.Repeat(client.model("repeat")).stream(IN=[1]):
                print(response.OUTT)
        """,
}


# The generated modules mypy --strict checks: once for this file, in one run (see mypy_says).
MODULES = {
    "models": [SIMPLE, STREAMED],
    "dupes": [DUPES],
    "helpers": [HELPERS],
    "weird": [WEIRD, WEIRD_STREAM],
    "collide": COLLIDING,
}


@pytest.fixture(scope="module")
def mypy_says(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """What mypy --strict says of each module in MODULES and each use in USES: its error
    lines, by file name (without .py)."""
    api = pytest.importorskip("mypy.api")
    folder = tmp_path_factory.mktemp("typed")
    files = {name: render(specs) for name, specs in MODULES.items()}
    files |= {f"use_{name}": textwrap.dedent(code) for name, code in USES.items()}
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    stdout, stderr, _ = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(folder / ".mypy_cache"),
            "--python-executable",
            sys.executable,
            *(str(folder / f"{name}.py") for name in files),
        ]
    )
    assert stderr == ""
    errors: dict[str, list[str]] = {name: [] for name in files}
    for line in stdout.splitlines():
        name = Path(line.split(":", 1)[0]).stem
        assert name in errors, line
        if ": error:" in line:
            errors[name].append(line)
    return errors


def test_mypy_catches_a_wrong_input_a_missing_input_and_a_wrong_output(
    mypy_says: dict[str, list[str]],
) -> None:
    assert mypy_says["models"] == []  # the generated module is clean
    assert mypy_says["use_good"] == []
    assert any('Unexpected keyword argument "INPUTO"' in line for line in mypy_says["use_typo"])
    assert any('Missing named argument "INPUT1"' in line for line in mypy_says["use_missing"])
    assert any('has no attribute "OUTPUTO"' in line for line in mypy_says["use_output"])
    assert any('has no attribute "OUTT"' in line for line in mypy_says["use_streamed"])
