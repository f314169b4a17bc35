"""Typed model handles: the spec is read once from the server's metadata and config."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import triton_sdk as ts


def test_text_embed_spec(client: Any) -> None:
    model = client.model("text_embed")
    assert model.name == "text_embed"
    assert model.version is None
    spec = model.spec
    assert isinstance(spec, ts.ModelSpec)
    assert spec.max_batch_size == 8
    assert spec.inputs["TEXT"] == ts.TensorSpec(name="TEXT", datatype="BYTES", shape=(1,))
    assert spec.inputs["TEXT"].dtype == np.dtype(object)
    assert spec.outputs["OUTPUT"].shape == (768,)
    assert spec.outputs["OUTPUT"].dtype == np.dtype(np.float32)
    assert spec.backend == "python"
    assert spec.dynamic_batching
    assert not spec.decoupled
    assert not spec.sequence
    assert spec.versions == ("1",)


def test_spec_of_model_without_batch_axis(client: Any) -> None:
    spec = client.model("add_sub").spec
    assert spec.max_batch_size == 0
    assert list(spec.inputs) == ["INPUT0", "INPUT1"]
    assert list(spec.outputs) == ["OUTPUT0", "OUTPUT1"]
    assert spec.inputs["INPUT0"].shape == (4,)
    assert not spec.dynamic_batching


def test_spec_keeps_model_order_optional_inputs_and_labels(client: Any) -> None:
    spec = client.model("scale").spec
    assert list(spec.inputs) == ["IMAGE", "SCALE", "BIAS"]
    assert [tensor.optional for tensor in spec.inputs.values()] == [False, False, True]
    assert spec.inputs["IMAGE"].datatype == "UINT8"
    assert spec.inputs["IMAGE"].shape == (2, 2)
    classifier = client.model("classifier").spec
    assert classifier.outputs["SCORES"].label_filename == "labels.txt"
    assert spec.outputs["OUT"].label_filename is None


def test_decoupled_and_sequence_models_are_flagged(client: Any) -> None:
    repeat = client.model("repeat").spec
    assert repeat.decoupled
    assert not repeat.sequence
    accumulate = client.model("accumulate").spec
    assert accumulate.sequence
    assert not accumulate.decoupled
    # Control inputs filled in by the server are not the caller's business.
    assert list(accumulate.inputs) == ["INPUT"]


def test_bf16_dtype(client: Any) -> None:
    spec = client.model("all_dtypes").spec
    import ml_dtypes

    assert spec.inputs["IN_BF16"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert spec.inputs["IN_BYTES"].datatype == "BYTES"


def test_version_is_kept_and_unknown_version_refused(client: Any) -> None:
    model = client.model("add_sub", "1")
    assert model.version == "1"
    assert model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1]).model_version == "1"
    with pytest.raises(ts.ModelNotFoundError):
        client.model("add_sub", "7")


def test_unknown_model(client: Any) -> None:
    with pytest.raises(ts.ModelNotFoundError, match="no_such_model"):
        client.model("no_such_model")
