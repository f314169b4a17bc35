"""Bulk inference: samples grouped into batches, and batch results cut back into samples."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from typing import Any, NamedTuple

import numpy as np

from ._errors import InvalidInputError, TritonError
from ._request import InferRequest, check_outputs
from ._shaping import Tensor, prepare_inputs
from ._spec import ModelSpec

__all__ = [
    "BatchBuilder",
    "PreparedSample",
    "batch_request",
    "check_batch_size",
    "default_batch_size",
    "progress_bar",
]


class PreparedSample(NamedTuple):
    """One sample, validated: its tensors (batch axis of 1) or why it was refused."""

    tensors: list[Tensor] | None
    error: TritonError | None = None

    @property
    def signature(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Samples with the same inputs and shapes can share a batch."""
        return tuple((t.name, t.array.shape[1:]) for t in self.tensors or ())


def default_batch_size(spec: ModelSpec) -> int:
    """The largest preferred batch size of the dynamic batcher, else ``max_batch_size``."""
    if not spec.batched:
        return 1
    preferred = [size for size in spec.preferred_batch_sizes if size <= spec.max_batch_size]
    return max(preferred) if preferred else spec.max_batch_size


def check_batch_size(spec: ModelSpec, batch_size: int | None) -> int:
    """The batch size map uses; refuses models map cannot serve (decoupled ones)."""
    if spec.decoupled:
        raise InvalidInputError(
            f"model {spec.name!r} is decoupled: map runs one request per batch and takes one "
            "response each; use model.stream(...) per request",
            model=spec.name,
        )
    size = default_batch_size(spec) if batch_size is None else batch_size
    if size < 1:
        raise InvalidInputError(f"batch_size must be >= 1, got {size}")
    if not spec.batched:
        return 1
    return min(size, spec.max_batch_size)


def prepare_sample(spec: ModelSpec, sample: object, collect: bool) -> PreparedSample:
    if not isinstance(sample, Mapping):
        error = InvalidInputError(
            f"map takes samples as mappings of input name to value, got {type(sample).__name__}",
            model=spec.name,
        )
        if collect:
            return PreparedSample(None, error)
        raise error
    try:
        return PreparedSample(prepare_inputs(spec, sample, sample=True).tensors)
    except InvalidInputError as error:
        if not collect:
            raise
        return PreparedSample(None, error)


class BatchBuilder:
    """Groups consecutive compatible samples into batches of at most ``batch_size``.

    A refused sample travels alone, so that its error keeps its place in the output.
    """

    def __init__(self, spec: ModelSpec, batch_size: int, collect: bool) -> None:
        self.spec = spec
        self.batch_size = batch_size
        self.collect = collect
        self._pending: list[PreparedSample] = []

    def add(self, sample: object) -> list[list[PreparedSample]]:
        """Take a sample; return the batches it completed (zero, one or two)."""
        prepared = prepare_sample(self.spec, sample, self.collect)
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


def join_samples(samples: list[PreparedSample], batched: bool) -> list[Tensor]:
    """The tensors of a batch: each input's samples concatenated along axis 0."""
    first = samples[0].tensors or []
    if len(samples) == 1 or not batched:
        return first
    return [
        Tensor(
            tensor.name,
            tensor.datatype,
            np.concatenate([(sample.tensors or [])[index].array for sample in samples]),
        )
        for index, tensor in enumerate(first)
    ]


def batch_request(
    spec: ModelSpec,
    version: str | None,
    samples: list[PreparedSample],
    outputs: Iterable[str] | None,
) -> InferRequest:
    """The request of one batch of validated samples."""
    return InferRequest(
        model=spec.name,
        version=version or "",
        inputs=join_samples(samples, spec.batched),
        outputs=None if outputs is None else check_outputs(spec, outputs),
    )


def progress_bar(samples: object) -> Any:
    """A tqdm bar counting samples (with a total when the samples have a length)."""
    from tqdm.auto import tqdm

    total = len(samples) if isinstance(samples, Sized) else None
    return tqdm(total=total, unit="sample")
