"""A protocol-neutral inference request, and the checks on its options."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

import attrs
import numpy as np

from ._checks import check_text, numpy_number, shown
from ._errors import InvalidInputError
from ._ops import Op
from ._result import InferResult
from ._shaping import Tensor
from ._spec import ModelSpec

if TYPE_CHECKING:
    from ._shm import Placement

__all__ = [
    "InferRequest",
    "ParameterValue",
    "RequestedOutput",
    "check_parameters",
    "output_names",
]

ParameterValue: TypeAlias = bool | int | float | str
"""A request parameter value, as the inference protocol allows it."""

ParameterInput: TypeAlias = ParameterValue | np.bool_ | np.integer[Any] | np.floating[Any]
"""What ``parameters=`` takes: a :data:`ParameterValue`, or a numpy scalar of those kinds
(``np.float32(0.5)``), sent as the Python value it holds."""

Priority: TypeAlias = int | np.integer[Any]
"""What ``priority=`` takes: an unsigned 64-bit int (0: the model's default level)."""

_RESERVED_PARAMETERS: Final = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data",
        "binary_data_size",
        "binary_data_output",
        "classification",
        "headers",
    }
)


@attrs.frozen
class RequestedOutput:
    """An output to return; ``class_count > 0`` asks for the top classes instead of scores."""

    name: str
    class_count: int = 0


@attrs.frozen(kw_only=True)
class InferRequest(Op[InferResult]):
    """Everything one inference call sends, already validated: the ``infer`` op."""

    call = "infer"

    model: str
    version: str = ""
    inputs: Sequence[Tensor]
    outputs: Sequence[RequestedOutput] | None = None
    """None asks for every output."""
    request_id: str = ""
    parameters: Mapping[str, ParameterValue] | None = None
    priority: int = 0
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    shared_memory: Placement | None = attrs.field(default=None, repr=False)
    """The inputs and outputs that travel through shared memory regions, if any."""
    triton: bool = attrs.field(default=True, repr=False)
    """Whether the server is Triton (it gives model configs): its gRPC parameters may be
    doubles and uint64, and it answers the outputs asked for only. Other servers (MLServer,
    KServe) have bool, int64 and string parameters, and answer every output."""

    def outputs_to_keep(self) -> frozenset[str] | None:
        """The outputs to keep of an answer that may hold more than were asked for (from
        a server other than Triton); None: keep the answer as it is."""
        if self.triton or self.outputs is None:
            return None
        return frozenset(output.name for output in self.outputs)

    def socket_inputs(self) -> list[Tensor]:
        """The inputs whose data goes on the socket (not in a shared-memory region)."""
        placement = self.shared_memory
        if placement is None:
            return list(self.inputs)
        return [tensor for tensor in self.inputs if tensor.name not in placement.inputs]

    @property
    def idempotent(self) -> bool:
        """Whether running the request twice is harmless (not so inside a sequence)."""
        return not self.sequence_id


def output_names(outputs: object) -> tuple[str, ...]:
    """The names of ``outputs=`` (one str, or an iterable of str)."""
    if isinstance(outputs, str):
        return (outputs,)
    try:
        names: tuple[object, ...] = tuple(outputs)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInputError(
            f"outputs must be output names, got {type(outputs).__name__}"
        ) from None
    checked = []
    for name in names:
        if not isinstance(name, str):
            raise InvalidInputError(f"output names must be str, got {type(name).__name__}")
        checked.append(name)
    return tuple(checked)


def check_outputs(
    spec: ModelSpec, names: Iterable[str], class_count: int = 0
) -> tuple[RequestedOutput, ...]:
    """Refuse output names the model does not have, before anything is sent."""
    requested = tuple(RequestedOutput(name, class_count) for name in output_names(names))
    if not requested:
        # Triton answers a request that names no output with all of them (over HTTP as
        # JSON, which cannot carry FP16, BF16 or BYTES that are not UTF-8).
        raise InvalidInputError(
            f"outputs is empty: name at least one output of {spec.name!r}, or leave "
            "outputs out for all of them",
            model=spec.name,
        )
    unknown = [output.name for output in requested if output.name not in spec.outputs]
    if unknown and (spec.outputs or spec.has_config):  # (else the server declared none)
        raise InvalidInputError(
            f"model {spec.name!r} has no output named {', '.join(map(repr, unknown))}; "
            f"its outputs are {', '.join(map(repr, spec.outputs))}",
            model=spec.name,
        )
    return requested


def check_priority(priority: Priority, model: str) -> int:
    """Priorities are unsigned 64-bit integers (0: the model's default level)."""
    given: object = priority  # callers without type checking can pass anything
    if numpy_number(given, integer=True):
        given = int(priority)
    if isinstance(given, bool) or not isinstance(given, int) or not 0 <= given < 2**64:
        raise InvalidInputError(
            f"priority must be an int in [0, 2**64), got {shown(priority)}", model=model
        )
    return given


def reserved_parameter(name: str) -> bool:
    """Whether the protocol (or Triton) reserves the parameter ``name``."""
    return name in _RESERVED_PARAMETERS or name.startswith("triton_")


def check_parameter_names(names: Iterable[object], model: str) -> None:
    """Refuse parameter names that are not text or that the protocol reserves."""
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"parameter names must be non-empty str, got {name!r}")
        check_text(name, "a parameter name")
        if reserved_parameter(name):
            raise InvalidInputError(
                f"parameter {name!r} is reserved by the inference protocol; "
                "use the call's own options instead",
                model=model,
            )


def check_parameters(
    parameters: Mapping[str, ParameterInput] | None, model: str
) -> Mapping[str, ParameterValue] | None:
    """Refuse parameters the protocol reserves or cannot carry; numpy scalars of the
    kinds it carries (``np.float32(0.5)``, ``np.int64(3)``, ``np.bool_``) become the
    Python values they hold."""
    if parameters is None:
        return None
    if not isinstance(parameters, Mapping):
        raise InvalidInputError(
            f"parameters must be a mapping of name to value, got {type(parameters).__name__}",
            model=model,
        )
    if not parameters:
        return None
    check_parameter_names(parameters, model)
    plain: dict[str, ParameterValue] | None = None
    for key, given in parameters.items():
        value: object = given  # (callers without type checking can pass anything)
        if isinstance(value, np.bool_) or numpy_number(value, integer=False):
            value = value.item()
            plain = {**cast("Mapping[str, ParameterValue]", parameters)} if plain is None else plain
            plain[key] = cast("ParameterValue", value)
        if isinstance(value, str):
            check_text(value, f"parameter {key!r}")
        elif not isinstance(value, bool | int | float):
            raise InvalidInputError(
                f"parameter {key!r} must be bool, int, float or str, got {type(value).__name__}",
                model=model,
            )
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise InvalidInputError(
                f"parameter {key!r}: {value} does not fit a 64-bit integer", model=model
            )
    # (what is not plain became plain above: a numpy scalar is no ParameterValue)
    return cast("Mapping[str, ParameterValue]", parameters) if plain is None else plain
