"""Bulk inference: samples grouped into batches, and batch results cut back into samples."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping, Sized
from typing import Any, NamedTuple

import numpy as np

from ._checks import check_int
from ._dtypes import EncodedBytes, encoded_payload, remember_encoding
from ._errors import (
    InferenceError,
    InvalidInputError,
    TritonError,
    UnsupportedRequestError,
    is_values_refusal,
)
from ._request import InferRequest, check_outputs
from ._result import InferResult
from ._shaping import Tensor, prepare_inputs
from ._spec import ModelSpec, stateful_message

__all__ = [
    "BatchBuilder",
    "MapPlan",
    "Outcome",
    "PreparedSample",
    "check_batch_size",
    "default_batch_size",
    "progress_bar",
]


class PreparedSample(NamedTuple):
    """One sample, validated: its tensors (batch axis of 1) or why it was refused; its
    position among the samples."""

    tensors: list[Tensor] | None
    error: TritonError | None = None
    position: int = 0

    @property
    def signature(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Samples with the same inputs and shapes can share a batch."""
        return tuple((t.name, t.array.shape[1:]) for t in self.tensors or ())


UNKNOWN_LIMIT_BATCH = 64
"""map's batch size for a model with a batch axis and no known limit (a spec from metadata)."""


def default_batch_size(spec: ModelSpec) -> int:
    """The largest preferred batch size of the dynamic batcher, else ``max_batch_size``
    (64 when the limit is not known)."""
    if not spec.batched:
        return 1
    if not spec.batch_limit_known:
        return UNKNOWN_LIMIT_BATCH
    preferred = [size for size in spec.preferred_batch_sizes if size <= spec.max_batch_size]
    return max(preferred) if preferred else spec.max_batch_size


def check_samples(samples: object, takes: type = Iterable) -> None:
    """``map`` takes an iterable (or, on AsyncModel, ``takes=AsyncIterable``, an async
    iterable too) of samples."""
    if takes is not AsyncIterable and isinstance(samples, AsyncIterable):
        raise InvalidInputError(
            "Model.map takes an iterable of samples; an async iterable goes to "
            "AsyncModel.map (an AsyncClient's model)"
        )
    if (
        not isinstance(samples, Iterable | AsyncIterable)
        or isinstance(samples, str | bytes)
        or (isinstance(samples, np.ndarray) and samples.ndim == 0)  # iterable in type only
    ):
        raise InvalidInputError(
            f"map takes an iterable of samples (mappings of input name to value), "
            f"got {'a 0-d array' if isinstance(samples, np.ndarray) else type(samples).__name__}"
        )


def check_batch_size(spec: ModelSpec, batch_size: int | None) -> int:
    """The batch size map uses; refuses models map cannot serve (decoupled ones)."""
    if spec.decoupled:
        raise InvalidInputError(
            f"model {spec.name!r} is decoupled: map runs one request per batch and takes one "
            "response each; use model.stream(...) per request",
            model=spec.name,
        )
    if spec.sequence:
        raise InvalidInputError(stateful_message(spec), model=spec.name)
    size = (
        default_batch_size(spec) if batch_size is None else check_int(batch_size, "batch_size", 1)
    )
    if not spec.batched:
        return 1
    return min(size, spec.max_batch_size)


def prepare_sample(spec: ModelSpec, sample: object, index: int) -> PreparedSample:
    """Validate one sample; a refused one carries its error, which names its position."""
    if not isinstance(sample, Mapping):
        return PreparedSample(
            None,
            InvalidInputError(
                f"sample {index}: map takes samples as mappings of input name to value, "
                f"got {type(sample).__name__}",
                model=spec.name,
            ),
            index,
        )
    try:
        prepared = prepare_inputs(spec, sample, sample=True, keywords=False)
    except InvalidInputError as error:
        return PreparedSample(
            None, InvalidInputError(f"sample {index}: {error}", model=spec.name), index
        )
    return PreparedSample(prepared.tensors, None, index)


class BatchBuilder:
    """Groups consecutive compatible samples into batches of at most ``batch_size``.

    A refused sample travels alone, so that its error keeps its place in the output.
    """

    def __init__(self, spec: ModelSpec, batch_size: int) -> None:
        self.spec = spec
        self.batch_size = batch_size
        self._pending: list[PreparedSample] = []
        self._count = 0

    def add(self, sample: object) -> list[list[PreparedSample]]:
        """Take a sample; return the batches it completed (zero, one or two)."""
        prepared = prepare_sample(self.spec, sample, self._count)
        self._count += 1
        done = []
        pending = self._pending
        if pending and (
            prepared.error is not None
            or pending[0].signature != prepared.signature
            or len(pending) >= self.batch_size
        ):
            done.append(pending)
            pending = self._pending = []
        if prepared.error is not None:
            done.append([prepared])
        else:
            pending.append(prepared)
            if len(pending) >= self.batch_size:
                done.append(pending)
                self._pending = []
        return done

    def flush(self) -> list[list[PreparedSample]]:
        """The last, partial batch."""
        pending, self._pending = self._pending, []
        return [pending] if pending else []


Outcome = InferResult | TritonError


class MapPlan:
    """What the blocking and the asyncio ``map`` share: checks, batching, and the turning
    of a batch's result (or failure) into one outcome per sample."""

    def __init__(
        self,
        spec: ModelSpec,
        version: str | None,
        batch_size: int | None,
        concurrency: int,
        errors: str,
        outputs: Iterable[str] | None,
    ) -> None:
        concurrency = check_int(concurrency, "concurrency", 1)
        if errors not in ("raise", "collect"):
            raise InvalidInputError(f"errors must be 'raise' or 'collect', got {errors!r}")
        self.spec = spec
        self.version = version
        self.builder = BatchBuilder(spec, check_batch_size(spec, batch_size))
        self.concurrency = concurrency
        self.collect = errors == "collect"
        self.outputs = None if outputs is None else check_outputs(spec, outputs)

    def request(self, samples: list[PreparedSample]) -> InferRequest:
        """The request of one batch of validated samples."""
        return InferRequest(
            model=self.spec.name,
            version=self.version or "",
            inputs=join_samples(samples, self.spec.batched),
            outputs=self.outputs,
            triton=self.spec.has_config,
        )

    def outcomes(self, samples: list[PreparedSample], result: InferResult) -> list[Outcome]:
        if not self.spec.batched:
            return [result]
        return list(result.split_rows(len(samples)))

    def isolate(self, samples: list[PreparedSample], error: TritonError) -> bool:
        """Whether to send a failed batch's samples one by one, to find the culprits.

        When the client could not send the batch for its values (one that JSON cannot
        carry, over HTTP without binary tensors; a request over gRPC's size): always, so
        that the samples before the culprit are answered, as before a sample refused
        when it was read. When the server refused it: only when collecting errors. A
        timed-out or cut-off batch may still run on the server, and is not sent again.
        """
        if len(samples) <= 1:
            return False
        if is_values_refusal(error):
            return True
        refused = type(error) in (InferenceError, UnsupportedRequestError) and not (
            error.retryable or error.may_have_run
        )
        return self.collect and refused

    def batch_error(self, samples: list[PreparedSample], error: TritonError) -> TritonError:
        """The error of a failed batch, naming its sample when it is one sample the
        client could not send for its values."""
        if len(samples) == 1 and is_values_refusal(error):
            named = InvalidInputError(
                f"sample {samples[0].position}: {error}",
                model=self.spec.name,
                request_id=error.request_id,
            )
            named.__cause__ = error
            return named
        return error

    def refusal(self, batch: list[PreparedSample]) -> TritonError | None:
        """The error of a batch that is one sample refused on the client, when it ends
        the map (``errors="raise"``): the batches before it are finished and yielded,
        and nothing after it is read or sent."""
        error = batch[0].error
        return None if self.collect else error

    def emit(self, outcome: Outcome) -> Outcome:
        """An outcome as map yields it: errors are raised unless they are collected."""
        if isinstance(outcome, TritonError) and not self.collect:
            raise outcome
        return outcome


def join_samples(samples: list[PreparedSample], batched: bool) -> list[Tensor]:
    """The tensors of a batch: each input's samples concatenated along axis 0."""
    first = samples[0].tensors or []
    if len(samples) == 1 or not batched:
        return first
    return [
        Tensor(
            tensor.name,
            tensor.datatype,
            _joined([(sample.tensors or [])[index].array for sample in samples], tensor.datatype),
        )
        for index, tensor in enumerate(first)
    ]


def _joined(arrays: list[np.ndarray[Any, Any]], datatype: str) -> np.ndarray[Any, Any]:
    """``arrays`` concatenated; for BYTES, with the samples' encoded payloads joined, so
    that the batch's size is known before it is sent (and it is not encoded again)."""
    joined = np.concatenate(arrays)
    if datatype != "BYTES":
        return joined
    payloads: list[bytes] = []
    for array in arrays:
        payload = encoded_payload(array)
        if payload is None:
            return joined  # (encoded when it is sent)
        payloads.append(payload)
    remember_encoding(joined, EncodedBytes(b"".join(payloads), joined.size))
    return joined


def progress_bar(samples: object) -> Any:
    """A tqdm bar counting samples (with a total when the samples have a length): a
    widget in a notebook that has ipywidgets, plain text everywhere else (tqdm's own
    choice warns in a notebook without ipywidgets)."""
    total = len(samples) if isinstance(samples, Sized) else None
    return _tqdm_class()(total=total, unit="sample")


def _tqdm_class() -> Any:
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm as chosen
    else:
        from tqdm.std import tqdm as chosen
    return chosen
