"""ModelSpec from the server's metadata and config, InferResult, and the server-level answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk import InferResult, ModelSpec, TensorSpec

# What Triton's HTTP endpoints answer for a python model with max_batch_size 8: int64
# fields as JSON numbers, every primitive field present.
HTTP_METADATA: dict[str, Any] = {
    "name": "classifier",
    "versions": ["1"],
    "platform": "python",
    "inputs": [
        {"name": "FEATURES", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "MASK", "datatype": "BOOL", "shape": [-1, 4]},
    ],
    "outputs": [
        {"name": "SCORES", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "NAMES", "datatype": "BYTES", "shape": [-1, 1]},
    ],
}
HTTP_CONFIG: dict[str, Any] = {
    "name": "classifier",
    "platform": "",
    "backend": "python",
    "runtime": "",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 8,
    "input": [
        {
            "name": "FEATURES",
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NONE",
            "dims": [4],
            "is_shape_tensor": False,
            "allow_ragged_batch": False,
            "optional": False,
        },
        {
            "name": "MASK",
            "data_type": "TYPE_BOOL",
            "format": "FORMAT_NONE",
            "dims": [4],
            "is_shape_tensor": False,
            "allow_ragged_batch": False,
            "optional": True,
        },
    ],
    "output": [
        {
            "name": "SCORES",
            "data_type": "TYPE_FP32",
            "dims": [3],
            "label_filename": "labels.txt",
            "is_shape_tensor": False,
        },
        {
            "name": "NAMES",
            "data_type": "TYPE_STRING",
            "dims": [1],
            "label_filename": "",
            "is_shape_tensor": False,
        },
    ],
    "batch_input": [],
    "batch_output": [],
    "optimization": {"priority": "PRIORITY_DEFAULT", "input_pinned_memory": {"enable": True}},
    "dynamic_batching": {
        "preferred_batch_size": [4, 8],
        "max_queue_delay_microseconds": 100,
        "preserve_ordering": False,
        "priority_levels": 0,
        "default_priority_level": 0,
        "priority_queue_policy": {},
    },
    "instance_group": [{"name": "classifier_0", "kind": "KIND_CPU", "count": 1}],
    "default_model_filename": "model.py",
    "cc_model_filenames": {},
    "metric_tags": {},
    "parameters": {},
    "model_warmup": [],
    "model_transaction_policy": {"decoupled": False},
}


def grpc_json(message: Any) -> dict[str, Any]:
    """What the gRPC backend makes of a message: int64 as strings, defaults left out."""
    decoded: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return decoded


def grpc_metadata() -> dict[str, Any]:
    tensor = pb.ModelMetadataResponse.TensorMetadata
    return grpc_json(
        pb.ModelMetadataResponse(
            name="classifier",
            versions=["1"],
            platform="python",
            inputs=[
                tensor(name="FEATURES", datatype="FP32", shape=[-1, 4]),
                tensor(name="MASK", datatype="BOOL", shape=[-1, 4]),
            ],
            outputs=[
                tensor(name="SCORES", datatype="FP32", shape=[-1, 3]),
                tensor(name="NAMES", datatype="BYTES", shape=[-1, 1]),
            ],
        )
    )


def grpc_config() -> dict[str, Any]:
    config = mc.ModelConfig(
        name="classifier",
        backend="python",
        max_batch_size=8,
        input=[
            mc.ModelInput(name="FEATURES", data_type=mc.TYPE_FP32, dims=[4]),
            mc.ModelInput(name="MASK", data_type=mc.TYPE_BOOL, dims=[4], optional=True),
        ],
        output=[
            mc.ModelOutput(
                name="SCORES", data_type=mc.TYPE_FP32, dims=[3], label_filename="labels.txt"
            ),
            mc.ModelOutput(name="NAMES", data_type=mc.TYPE_STRING, dims=[1]),
        ],
        dynamic_batching=mc.ModelDynamicBatching(
            preferred_batch_size=[4, 8], max_queue_delay_microseconds=100
        ),
        default_model_filename="model.py",
    )
    config.model_transaction_policy.decoupled = False
    return grpc_json(config)


def test_grpc_json_really_has_strings_and_omissions() -> None:
    # Guard the fixture itself: the gRPC form differs from the HTTP one.
    metadata, config = grpc_metadata(), grpc_config()
    assert metadata["inputs"][0]["shape"] == ["-1", "4"]
    assert config["input"][0]["dims"] == ["4"]
    assert "optional" not in config["input"][0]
    assert "platform" not in config
    assert "label_filename" not in config["output"][1]


EXPECTED = ModelSpec(
    name="classifier",
    versions=("1",),
    platform="python",
    backend="python",
    max_batch_size=8,
    inputs={
        "FEATURES": TensorSpec(name="FEATURES", datatype="FP32", shape=(4,)),
        "MASK": TensorSpec(name="MASK", datatype="BOOL", shape=(4,), optional=True),
    },
    outputs={
        "SCORES": TensorSpec(
            name="SCORES", datatype="FP32", shape=(3,), label_filename="labels.txt"
        ),
        "NAMES": TensorSpec(name="NAMES", datatype="BYTES", shape=(1,)),
    },
    dynamic_batching=True,
    preferred_batch_sizes=(4, 8),
)


def test_spec_from_http_json() -> None:
    spec = ModelSpec.from_metadata(HTTP_METADATA, HTTP_CONFIG)
    assert spec == EXPECTED
    assert list(spec.inputs) == ["FEATURES", "MASK"]
    assert list(spec.outputs) == ["SCORES", "NAMES"]
    assert spec.inputs["FEATURES"].shape == (4,)  # no batch axis
    assert spec.inputs["MASK"].optional
    assert not spec.inputs["FEATURES"].optional
    assert spec.outputs["SCORES"].label_filename == "labels.txt"
    assert spec.outputs["NAMES"].label_filename is None
    assert spec.outputs["NAMES"].dtype == np.object_
    assert spec.platform == "python"
    assert spec.backend == "python"
    assert spec.batched
    assert not spec.decoupled
    assert not spec.sequence


def test_spec_from_grpc_json_equals_spec_from_http_json() -> None:
    from_grpc = ModelSpec.from_metadata(grpc_metadata(), grpc_config())
    from_http = ModelSpec.from_metadata(HTTP_METADATA, HTTP_CONFIG)
    assert from_grpc == from_http == EXPECTED
    assert list(from_grpc.inputs) == list(from_http.inputs)
    assert list(from_grpc.outputs) == list(from_http.outputs)
    assert all(type(dim) is int for spec in from_grpc.inputs.values() for dim in spec.shape)
    assert type(from_grpc.max_batch_size) is int


def unbatched(**config: Any) -> ModelSpec:
    metadata = {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1, 3]}],
        "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [-1]}],
    }
    return ModelSpec.from_metadata(metadata, {"name": "add_sub", "backend": "python", **config})


def test_batch_axis_is_kept_when_max_batch_size_is_0() -> None:
    spec = unbatched(max_batch_size=0)
    assert spec.max_batch_size == 0
    assert not spec.batched
    assert spec.inputs["IN"].shape == (1, 3)
    assert spec.outputs["OUT"].shape == (-1,)


def test_max_batch_size_left_out_means_0() -> None:
    spec = unbatched()  # gRPC JSON omits a zero max_batch_size
    assert spec.max_batch_size == 0
    assert spec.inputs["IN"].shape == (1, 3)
    assert not spec.dynamic_batching
    assert spec.preferred_batch_sizes == ()


def test_decoupled_from_transaction_policy() -> None:
    assert unbatched(model_transaction_policy={"decoupled": True}).decoupled
    assert not unbatched(model_transaction_policy={"decoupled": False}).decoupled
    assert not unbatched(model_transaction_policy={}).decoupled


def test_sequence_when_sequence_batching_is_present() -> None:
    assert unbatched(sequence_batching={}).sequence
    assert unbatched(sequence_batching={"max_sequence_idle_microseconds": "5000000"}).sequence
    assert not unbatched().sequence


def test_dynamic_batching_without_preferred_sizes() -> None:
    spec = unbatched(dynamic_batching={})
    assert spec.dynamic_batching
    assert spec.preferred_batch_sizes == ()


def test_ensemble_has_a_platform_and_no_backend() -> None:
    metadata = {
        "name": "pipeline",
        "versions": ["1"],
        "platform": "ensemble",
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 2]}],
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [-1, 2]}],
    }
    http_config = {
        "name": "pipeline",
        "platform": "ensemble",
        "backend": "",
        "max_batch_size": 4,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
        "ensemble_scheduling": {"step": [{"model_name": "a", "model_version": -1}]},
    }
    grpc_config = grpc_json(
        mc.ModelConfig(
            name="pipeline",
            platform="ensemble",
            max_batch_size=4,
            input=[mc.ModelInput(name="IN", data_type=mc.TYPE_FP32, dims=[2])],
            output=[mc.ModelOutput(name="OUT", data_type=mc.TYPE_FP32, dims=[2])],
        )
    )
    for config in (http_config, grpc_config):
        spec = ModelSpec.from_metadata(metadata, config)
        assert spec.platform == "ensemble"
        assert spec.backend is None
        assert spec.inputs["IN"].shape == (2,)


def test_datatype_from_config_when_metadata_has_none() -> None:
    metadata = {"name": "m", "inputs": [{"name": "IN", "shape": [-1, 2]}], "outputs": []}
    config = {
        "max_batch_size": 2,
        "input": [{"name": "IN", "data_type": "TYPE_STRING", "dims": [2]}],
    }
    assert ModelSpec.from_metadata(metadata, config).inputs["IN"].datatype == "BYTES"


def test_spec_is_frozen_and_its_mappings_are_read_only() -> None:
    spec = ModelSpec.from_metadata(HTTP_METADATA, HTTP_CONFIG)
    with pytest.raises(TypeError):
        spec.inputs["NEW"] = TensorSpec(name="NEW", datatype="FP32", shape=(1,))  # type: ignore[index]


def test_specs_that_differ_are_not_equal() -> None:
    changed = ModelSpec.from_metadata(HTTP_METADATA, {**HTTP_CONFIG, "max_batch_size": 4})
    assert changed != EXPECTED


# InferResult


def make_result(**outputs: np.ndarray[Any, Any]) -> InferResult:
    names = {np.dtype(np.float32): "FP32", np.dtype(np.object_): "BYTES"}
    datatypes = {name: names[array.dtype] for name, array in outputs.items()}
    return InferResult(
        outputs,
        datatypes=datatypes,
        model_name="m",
        model_version="1",
        id="r1",
        parameters={"sequence_end": True},
    )


SCORES = np.arange(6, dtype=np.float32).reshape(2, 3)
NAMES = np.array([["안녕".encode()], [b"world"]], dtype=np.object_)


def test_result_is_a_mapping() -> None:
    result = make_result(SCORES=SCORES, NAMES=NAMES)
    assert list(result) == ["SCORES", "NAMES"]
    assert len(result) == 2
    assert "SCORES" in result
    assert "OTHER" not in result
    assert result.get("OTHER") is None
    assert result["SCORES"] is SCORES
    assert dict(result.items())["NAMES"] is NAMES
    assert result.model_name == "m"
    assert result.model_version == "1"
    assert result.id == "r1"
    assert result.parameters == {"sequence_end": True}


def test_results_compare_by_their_metadata_and_outputs() -> None:
    result = make_result(SCORES=SCORES, NAMES=NAMES)
    assert result == make_result(SCORES=SCORES.copy(), NAMES=NAMES.copy())
    assert result == {"SCORES": SCORES.tolist(), "NAMES": NAMES}  # any mapping of arrays
    assert result != make_result(SCORES=SCORES + 1, NAMES=NAMES)
    assert result != make_result(SCORES=SCORES.reshape(3, 2), NAMES=NAMES)
    assert result != make_result(SCORES=SCORES)
    assert result != {"SCORES": SCORES}

    def like(scores: np.ndarray[Any, Any], datatype: str = "FP32", id: str = "r1") -> InferResult:
        return InferResult(
            {"SCORES": scores, "NAMES": NAMES},
            datatypes={"SCORES": datatype, "NAMES": "BYTES"},
            model_name="m",
            model_version="1",
            id=id,
            parameters={"sequence_end": True},
        )

    assert result == like(SCORES)
    assert result != like(SCORES, id="r2")
    assert result != like(SCORES.astype(np.float64), "FP64")
    assert result != "m"
    with pytest.raises(TypeError):
        hash(result)


def test_as_numpy_is_item_access() -> None:
    result = make_result(SCORES=SCORES)
    assert result.as_numpy("SCORES") is result["SCORES"]


def test_as_strings_decodes_utf8_keeping_the_shape() -> None:
    strings = make_result(NAMES=NAMES).as_strings("NAMES")
    assert strings.dtype == np.object_
    assert strings.shape == (2, 1)
    assert strings.tolist() == [["안녕"], ["world"]]
    assert all(type(item) is str for item in strings.reshape(-1))


def test_as_strings_on_a_non_bytes_output() -> None:
    with pytest.raises(ts.InvalidInputError, match="SCORES"):
        make_result(SCORES=SCORES).as_strings("SCORES")


@pytest.mark.parametrize("encoding", [None, 8, b"utf-8"])
def test_as_strings_refuses_an_encoding_that_is_not_a_str(encoding: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="encoding must be a str"):
        make_result(NAMES=NAMES).as_strings("NAMES", encoding)


def test_as_strings_on_bytes_that_are_not_text_names_the_element() -> None:
    raw = np.array([[b"ok"], [b"\xff\xfe"]], dtype=np.object_)
    with pytest.raises(ts.InvalidInputError) as info:
        make_result(NAMES=raw).as_strings("NAMES")
    message = str(info.value)
    assert "'NAMES' element 1 is not utf-8 text" in message
    assert "b'\\xff\\xfe'" in message
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
    assert make_result(NAMES=raw).as_strings("NAMES", "latin-1")[1, 0] == "\xff\xfe"
    with pytest.raises(ts.InvalidInputError, match="unknown encoding 'klingon'"):
        make_result(NAMES=raw).as_strings("NAMES", "klingon")
    with pytest.raises(ts.InvalidInputError, match="'base64' is not a text encoding"):
        make_result(NAMES=raw).as_strings("NAMES", "base64")


@pytest.mark.parametrize("encoding", ["utf-8\x00", "klingon", ""])
def test_as_strings_refuses_an_unknown_encoding_even_with_nothing_to_decode(encoding: str) -> None:
    # A NUL in the name raised numpy's plain ValueError; an empty output decoded nothing
    # and so took any name.
    for names in (NAMES, np.empty((0, 1), dtype=np.object_)):
        with pytest.raises(ts.InvalidInputError, match="as_strings: unknown encoding"):
            make_result(NAMES=names).as_strings("NAMES", encoding)


def test_as_strings_refuses_a_codec_that_is_not_for_text_even_with_nothing_to_decode() -> None:
    empty = make_result(NAMES=np.empty((0, 1), dtype=np.object_))
    with pytest.raises(ts.InvalidInputError, match="'base64' is not a text encoding"):
        empty.as_strings("NAMES", "base64")


def test_unknown_output() -> None:
    result = make_result(SCORES=SCORES, NAMES=NAMES)
    for access in (result.__getitem__, result.as_numpy, result.as_strings):
        with pytest.raises(ts.UnknownOutputError) as info:
            access("NOPE")
        message = str(info.value)
        assert "'NOPE'" in message
        assert "'SCORES'" in message
        assert "'NAMES'" in message
    with pytest.raises(KeyError):
        result["NOPE"]
    with pytest.raises(ts.UnknownOutputError, match=r"it has none \(the server sent no output\)"):
        make_result()["NOPE"]


def test_to_dict() -> None:
    result = make_result(SCORES=SCORES, NAMES=NAMES)
    outputs = result.to_dict()
    assert outputs.keys() == {"SCORES", "NAMES"}
    assert outputs["SCORES"] is SCORES
    outputs.pop("SCORES")  # a copy: the result keeps its outputs
    assert "SCORES" in result


def test_without_batch_axis() -> None:
    result = make_result(SCORES=SCORES[:1], NAMES=NAMES[:1]).without_batch_axis()
    assert result["SCORES"].shape == (3,)
    assert result["SCORES"].tolist() == [0.0, 1.0, 2.0]
    assert result.as_strings("NAMES").tolist() == ["안녕"]
    assert result.datatype("SCORES") == "FP32"
    assert (result.model_name, result.model_version, result.id) == ("m", "1", "r1")
    assert result.parameters == {"sequence_end": True}


def test_concatenate_joins_chunks_in_order() -> None:
    parts = [
        make_result(SCORES=SCORES[i : i + 1], NAMES=NAMES[i : i + 1])
        for i in range(SCORES.shape[0])
    ]
    joined = InferResult.concatenate(parts)
    np.testing.assert_array_equal(joined["SCORES"], SCORES)
    assert joined["NAMES"].tolist() == NAMES.tolist()
    assert list(joined) == ["SCORES", "NAMES"]
    assert joined.datatype("NAMES") == "BYTES"
    assert (joined.model_name, joined.model_version) == ("m", "1")


def test_concatenate_one_part() -> None:
    only = make_result(SCORES=SCORES)
    np.testing.assert_array_equal(InferResult.concatenate([only])["SCORES"], SCORES)


def test_result_repr_names_outputs() -> None:
    text = repr(make_result(SCORES=SCORES))
    assert "SCORES" in text
    assert "'m'" in text


# Server-level answers


def test_server_metadata_from_json() -> None:
    metadata = ts.ServerMetadata.from_json(
        {
            "name": "triton",
            "version": "2.50.0",
            "extensions": ["classification", "sequence", "model_repository"],
        }
    )
    assert metadata == ts.ServerMetadata(
        name="triton",
        version="2.50.0",
        extensions=("classification", "sequence", "model_repository"),
    )
    assert isinstance(metadata.extensions, tuple)


def test_server_metadata_without_extensions() -> None:
    metadata = ts.ServerMetadata.from_json({"name": "triton", "version": "2.50.0"})
    assert metadata.extensions == ()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"name": "m", "version": "1", "state": "READY"},
            ts.ModelStatus(name="m", version="1", state="READY", reason=""),
        ),
        (
            {"name": "bad", "version": "1", "state": "UNAVAILABLE", "reason": "load failed"},
            ts.ModelStatus(name="bad", version="1", state="UNAVAILABLE", reason="load failed"),
        ),
        # never loaded: HTTP leaves the fields out, gRPC sends empty strings
        ({"name": "idle"}, ts.ModelStatus(name="idle", version=None, state="", reason="")),
        (
            {"name": "idle", "version": "", "state": "", "reason": ""},
            ts.ModelStatus(name="idle", version=None, state="", reason=""),
        ),
    ],
)
def test_model_status_from_json(entry: dict[str, str], expected: ts.ModelStatus) -> None:
    assert ts.ModelStatus.from_json(entry) == expected


@pytest.mark.parametrize(
    ("control", "strings", "integers"),
    [("TYPE_STRING", True, False), ("TYPE_UINT64", False, True), (None, False, False)],
)
def test_sequence_id_type_comes_from_the_corrid_control(
    control: str | None, strings: bool, integers: bool
) -> None:
    batching: dict[str, object] = {}
    if control is not None:
        corrid = {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": control}
        batching["control_input"] = [{"name": "CORRID", "control": [corrid]}]
    spec = ModelSpec.from_metadata({"name": "m"}, {"name": "m", "sequence_batching": batching})
    assert spec.sequence
    assert spec.string_sequence_ids is strings
    assert spec.integer_sequence_ids is integers
