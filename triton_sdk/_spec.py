"""Typed descriptions of a model, built from the server's model metadata and config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

import attrs
import numpy as np

from ._checks import repeated
from ._display import Displayable, Table
from ._dtypes import config_type_to_datatype, numpy_dtype
from ._errors import InvalidInputError

__all__ = [
    "NO_KNOWN_LIMIT",
    "ModelSpec",
    "SpecSource",
    "TensorSpec",
    "json_int",
    "stateful_message",
]

JSON = Mapping[str, Any]
"""A decoded JSON object, as the server sends metadata and config (or gRPC's equivalent)."""


@attrs.frozen
class TensorSpec:
    """One input or output of a model.

    Attributes:
        name: the tensor's name.
        datatype: the Triton datatype, e.g. ``"FP32"`` or ``"BYTES"``.
        shape: the shape of one sample; never includes the batch axis. ``-1`` marks an
            axis of any size.
        optional: (inputs) the model runs without this input.
        label_filename: (outputs) the label file the config names for classification.
    """

    name: str
    datatype: str = attrs.field(kw_only=True)
    shape: tuple[int, ...] = attrs.field(kw_only=True)
    optional: bool = attrs.field(default=False, kw_only=True)
    label_filename: str | None = attrs.field(default=None, kw_only=True)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of this tensor (``np.object_`` for BYTES)."""
        return numpy_dtype(self.datatype)


def _freeze(specs: Mapping[str, TensorSpec]) -> Mapping[str, TensorSpec]:
    return MappingProxyType({spec.name: spec for spec in specs.values()})


SpecSource = Literal["config", "metadata", "override"]

NO_KNOWN_LIMIT: Final = 2**31 - 1
"""``max_batch_size`` of a model with a batch axis and no known limit (a spec read from
metadata alone): batches are never split."""


def _frozen_parameters(parameters: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(parameters))


def _same_specs(left: Mapping[str, TensorSpec], right: Mapping[str, TensorSpec]) -> bool:
    return dict(left) == dict(right)


@attrs.frozen(kw_only=True)
class ModelSpec(Displayable):
    """What a model takes and returns, and how the server schedules it.

    Attributes:
        name: the model's name.
        versions: the versions the server reported as available.
        platform: the model's platform (``"ensemble"``, ``"python"``, ``"onnxruntime_onnx"``...).
        backend: the backend that runs it, or ``None`` (ensembles have none).
        max_batch_size: the largest batch the model accepts; 0 means it takes no batch axis.
        inputs: input name -> spec, in the model's order.
        outputs: output name -> spec, in the model's order.
        decoupled: the model may send any number of responses per request.
        sequence: the model is stateful (sequence batching).
        string_sequence_ids: the sequence batcher takes string ids (its CORRID control
            is TYPE_STRING); otherwise ids are integers.
        integer_sequence_ids: the sequence batcher's CORRID control takes integers, so a
            string id is refused before sending. A model without a CORRID control
            takes either.
        dynamic_batching: the server gathers requests into batches.
        preferred_batch_sizes: the batch sizes the dynamic batcher prefers.
        parameters: the ``parameters`` of the model's config, key -> string value (e.g.
            a ``chat_template`` for :meth:`~triton_sdk.Model.chat`).
        source: where the spec came from: ``"config"`` (the model's metadata and config),
            ``"metadata"`` (metadata alone: the server has no config endpoint, as MLServer
            and KServe have none; a leading -1 on every input and output means batched
            with no known limit, :data:`NO_KNOWN_LIMIT`), or ``"override"`` (the
            ``max_batch_size`` given to ``client.model``).
        has_config: the server gave the model's config, as Triton does (``source`` is
            ``"override"`` either way when ``max_batch_size`` was given). Without one
            (MLServer, KServe) the server is taken for a plain Open Inference Protocol
            server: ``generate`` travels as an inference, and ``stream`` and
            ``generate_stream`` through the server's own streaming endpoint (see
            docs/servers.md).
    """

    name: str
    versions: tuple[str, ...] = ()
    platform: str = ""
    backend: str | None = None
    max_batch_size: int = 0
    inputs: Mapping[str, TensorSpec] = attrs.field(
        factory=dict, converter=_freeze, eq=attrs.cmp_using(eq=_same_specs), hash=False
    )
    outputs: Mapping[str, TensorSpec] = attrs.field(
        factory=dict, converter=_freeze, eq=attrs.cmp_using(eq=_same_specs), hash=False
    )
    decoupled: bool = False
    sequence: bool = False
    string_sequence_ids: bool = False
    integer_sequence_ids: bool = False
    dynamic_batching: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    parameters: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_parameters, hash=False
    )
    source: SpecSource = "config"
    has_config: bool = True

    def describe(self) -> str:
        """A few lines showing what the model takes and returns."""
        return self._table().text()

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # (pickle and deepcopy refuse the read-only mappings: they travel as dicts)
        fields = {field.name: getattr(self, field.name) for field in attrs.fields(type(self))}
        plain = {
            name: dict(value) if isinstance(value, MappingProxyType) else value
            for name, value in fields.items()
        }
        return (_spec_from_fields, (plain,))

    def _table(self) -> Table:
        kind = self.backend or self.platform or "model"
        if not self.batched:
            traits = ["no batch axis"]
        elif self.batch_limit_known:
            traits = [f"max_batch_size {self.max_batch_size}"]
        else:
            traits = ["batched, no known limit"]
        if self.source != "config":
            traits.append(f"from {self.source}")
        traits += [
            trait
            for trait, present in (
                ("dynamic batching", self.dynamic_batching),
                ("decoupled", self.decoupled),
                ("sequences", self.sequence),
            )
            if present
        ]
        rows = [
            (role, tensor.name, tensor.datatype, str(list(tensor.shape)), note)
            for role, tensors in (("input", self.inputs), ("output", self.outputs))
            for tensor in tensors.values()
            for note in ["optional" if tensor.optional else ""]
        ]
        title = f"{self.name}  ({kind}, {', '.join(traits)})"
        return Table(title, ("", "name", "datatype", "shape", ""), rows)

    @property
    def batched(self) -> bool:
        """The model takes a batch axis (``max_batch_size > 0``)."""
        return self.max_batch_size > 0

    @property
    def batch_limit_known(self) -> bool:
        """Whether ``max_batch_size`` is the model's real limit (not :data:`NO_KNOWN_LIMIT`)."""
        return self.max_batch_size != NO_KNOWN_LIMIT

    @classmethod
    def from_metadata(
        cls, metadata: JSON, config: JSON | None, *, max_batch_size: int | None = None
    ) -> ModelSpec:
        """Build a spec from the server's model metadata and model config.

        Shapes and datatypes come from the metadata (what the server checks requests
        against), with the batch axis removed; the rest comes from the config. Without a
        config (``None``), a leading -1 on every input and output means a batch axis with
        no known limit. ``max_batch_size`` overrides both (0: no batch axis).
        """
        source: SpecSource = "config" if config is not None else "metadata"
        has_config = config is not None
        config = config or {}
        if max_batch_size is not None:
            source = "override"
            _check_batch_axis(metadata, max_batch_size)
        elif source == "metadata":
            max_batch_size = NO_KNOWN_LIMIT if _leading_batch_axis(metadata) else 0
        else:
            max_batch_size = json_int(config.get("max_batch_size", 0))
            if not 0 <= max_batch_size < 2**31:  # (an int32 of 0 or more in Triton's config)
                raise ValueError(f"max_batch_size {max_batch_size} is not one")
        input_configs = {item["name"]: item for item in config.get("input", ())}
        output_configs = {item["name"]: item for item in config.get("output", ())}
        inputs = [
            _tensor_spec(item, input_configs.get(item["name"], {}), max_batch_size)
            for item in metadata.get("inputs") or ()
        ]
        outputs = [
            _tensor_spec(item, output_configs.get(item["name"], {}), max_batch_size)
            for item in metadata.get("outputs") or ()
        ]
        for kind, tensors in (("input", inputs), ("output", outputs)):
            names = [tensor.name for tensor in tensors]
            if len(set(names)) != len(names):
                twice = ", ".join(map(repr, repeated(names)))
                raise ValueError(f"the model has two {kind}s named {twice}")
        dynamic = config.get("dynamic_batching")
        policy = config.get("model_transaction_policy") or {}
        decoupled = policy.get("decoupled", False)
        if not isinstance(decoupled, bool):
            raise ValueError(f"model_transaction_policy.decoupled is {decoupled!r}, not a bool")
        backend = str(config.get("backend") or "") or None
        return cls(
            name=str(metadata.get("name") or config.get("name") or ""),
            versions=tuple(str(version) for version in metadata.get("versions") or ()),
            platform=str(config.get("platform") or metadata.get("platform") or backend or ""),
            backend=backend,
            max_batch_size=max_batch_size,
            inputs={spec.name: spec for spec in inputs},
            outputs={spec.name: spec for spec in outputs},
            decoupled=decoupled,
            sequence="sequence_batching" in config,
            string_sequence_ids=_corrid_type(config) == "TYPE_STRING",
            integer_sequence_ids=_corrid_type(config) not in (None, "TYPE_STRING"),
            dynamic_batching=dynamic is not None,
            preferred_batch_sizes=tuple(
                json_int(size) for size in (dynamic or {}).get("preferred_batch_size", ())
            ),
            parameters={
                str(key): str((value or {}).get("string_value", ""))
                for key, value in (config.get("parameters") or {}).items()
            },
            source=source,
            has_config=has_config,
        )


def _shapes(metadata: JSON) -> list[tuple[str, list[Any]]]:
    tensors = [*(metadata.get("inputs") or ()), *(metadata.get("outputs") or ())]
    return [(str(item.get("name")), list(item.get("shape") or ())) for item in tensors]


def _leading_batch_axis(metadata: JSON) -> bool:
    shapes = _shapes(metadata)
    return bool(shapes) and all(shape and json_int(shape[0]) == -1 for _, shape in shapes)


def _check_batch_axis(metadata: JSON, max_batch_size: object) -> None:
    if (
        not isinstance(max_batch_size, int)
        or isinstance(max_batch_size, bool)
        or max_batch_size < 0
    ):
        raise InvalidInputError(f"max_batch_size must be 0 or more, got {max_batch_size!r}")
    if max_batch_size == 0:
        return
    for name, shape in _shapes(metadata):
        if not shape or json_int(shape[0]) != -1:
            raise InvalidInputError(
                f"max_batch_size={max_batch_size} needs a leading -1 (the batch axis) on every "
                f"tensor; {name!r} has shape {shape}: use max_batch_size=0",
                model=str(metadata.get("name") or "") or None,
            )


def _corrid_type(config: JSON) -> str | None:
    """The data type of the sequence batcher's CORRID control, if it has one."""
    for control_input in (config.get("sequence_batching") or {}).get("control_input", ()):
        for control in control_input.get("control", ()):
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID":
                return str(control.get("data_type") or "TYPE_UINT64")
    return None


def json_int(value: Any) -> int:
    """An integer field of a decoded answer: gRPC's JSON form writes 64-bit integers as
    strings and leaves out fields that are zero. Anything else (2.5, true, "8.0") is
    refused (ValueError), not rounded."""
    if value is None or value == "":
        return 0
    if type(value) is int:
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise ValueError(f"{value!r} is not an integer")


_INTEGER: Final = re.compile(r"-?[0-9]{1,20}")


def _tensor_spec(metadata: JSON, config: JSON, max_batch_size: int) -> TensorSpec:
    shape = tuple(json_int(dim) for dim in metadata.get("shape", ()))
    if max_batch_size > 0 and shape:
        shape = shape[1:]
    datatype = str(metadata.get("datatype") or "")
    if not datatype and "data_type" in config:
        datatype = config_type_to_datatype(str(config["data_type"]))
    numpy_dtype(datatype)  # a datatype Triton does not have is refused here, not at infer
    label_filename = str(config.get("label_filename") or "") or None
    return TensorSpec(
        name=str(metadata["name"]),
        datatype=datatype,
        shape=shape,
        optional=bool(config.get("optional", False)),
        label_filename=label_filename,
    )


def stateful_message(spec: ModelSpec) -> str:
    """Why a request outside a sequence is refused: Triton refuses one to a model with
    sequence batching ("must specify a non-zero or non-empty correlation ID")."""
    if spec.decoupled:
        return (
            f"model {spec.name!r} is decoupled and stateful (sequence batching): its "
            "requests are streamed within a sequence, which this SDK does not do yet "
            "(tritonclient's gRPC stream_infer with a sequence_id does)"
        )
    return (
        f"model {spec.name!r} is stateful (sequence batching): the server takes its "
        "requests only within a sequence; use model.sequence(...)"
    )


def _spec_from_fields(fields: dict[str, Any]) -> ModelSpec:
    """A ModelSpec again, from :meth:`ModelSpec.__reduce__`."""
    return ModelSpec(**fields)
