"""Typed per-model stubs: the module stubgen writes, the checks its classes make, and what
mypy --strict says of code that uses them. Against a real server: tests/integration."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._stubgen import class_name, differences, render
from triton_sdk.stubs import signature
from triton_sdk.testing import MockTransport


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
    ],
)
def test_class_names(model: str, expected: str) -> None:
    assert class_name(model) == expected


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
    import inspect

    module = load(render([ODD]), tmp_path)
    parameters = inspect.signature(module.OddModelV2.infer).parameters
    assert {"input_1", "class_", "timeout_"} <= set(parameters)
    assert parameters["timeout_"].default is None  # optional input
    assert parameters["timeout"].default is ts.NOT_GIVEN  # the call's own option
    assert isinstance(inspect.getattr_static(module.OddModelV2Result, "id_"), property)
    assert isinstance(inspect.getattr_static(module.OddModelV2Result, "_9lives"), property)


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
}


def test_mypy_catches_a_wrong_input_a_missing_input_and_a_wrong_output(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    (tmp_path / "models.py").write_text(render([SIMPLE]))
    for name, code in USES.items():
        (tmp_path / f"use_{name}.py").write_text(textwrap.dedent(code))
    stdout, stderr, _ = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "--python-executable",
            sys.executable,
            *(str(tmp_path / f"{name}.py") for name in ["models", *(f"use_{n}" for n in USES)]),
        ]
    )
    assert stderr == ""
    errors: dict[str, list[str]] = {name: [] for name in USES}
    for line in stdout.splitlines():
        for name in USES:
            if f"use_{name}.py:" in line and ": error:" in line:
                errors[name].append(line)
        assert "models.py:" not in line, line  # the generated module is clean
    assert errors["good"] == []
    assert any('Unexpected keyword argument "INPUTO"' in line for line in errors["typo"])
    assert any('Missing named argument "INPUT1"' in line for line in errors["missing"])
    assert any('has no attribute "OUTPUTO"' in line for line in errors["output"])
