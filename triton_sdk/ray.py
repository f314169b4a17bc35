"""Bulk inference on Ray Data: a model as a callable class for ``Dataset.map_batches``.

>>> import ray, triton_sdk.ray                                    # doctest: +SKIP
>>> ds = ray.data.read_parquet("s3://bucket/images/")             # doctest: +SKIP
>>> scored = ds.map_batches(
...     triton_sdk.ray.TritonPredictor,
...     fn_constructor_args=(["grpc://10.0.0.1:8001", "grpc://10.0.0.2:8001"], "resnet"),
...     fn_constructor_kwargs={"inputs": {"INPUT": "image"}, "keep": ["id"]},
...     concurrency=4,                 # Ray workers, each with one client
...     batch_size=256,
... )                                                              # doctest: +SKIP

Ray makes one :class:`TritonPredictor` per worker, so each worker has one client (with
its connections, and its balancing over the endpoints); each batch becomes one
``model.infer`` call, split into requests of the model's ``max_batch_size`` that run at
once. Batches may come as numpy (``{"column": array}``), pandas or pyarrow; the answer is
numpy columns: the outputs, and the columns named in ``keep``. ``ray`` itself is needed
only to run the Dataset (``pip install "triton-sdk-py[ray]"``); this module does not import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._client import Client, Model
from ._errors import InvalidInputError
from ._result import Array

__all__ = ["TritonPredictor"]

Batch = Mapping[str, Any] | Any
"""What Ray hands a ``map_batches`` callable: a dict of numpy arrays, a pandas DataFrame
or a pyarrow Table."""


class TritonPredictor:
    """Runs one model over Ray Data batches; see the module documentation.

    Args:
        url: the server's address, a list of replicas' addresses, or a ``dns:///`` name
            (as for :class:`~triton_sdk.Client`).
        model: the model's name.
        inputs: which column feeds each model input: ``{"INPUT": "image"}``, or a list of
            input names that are also column names. By default every model input, from
            the column of the same name.
        outputs: the outputs to return (by default every output of the model).
        keep: columns of the batch returned as they came (ids, labels).
        version: the model version; the latest by default.
        client_options: keyword arguments for the worker's ``Client`` (``timeout``,
            ``retry``, ``headers``, ...).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        model: str,
        *,
        inputs: Mapping[str, str] | Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
        keep: Sequence[str] = (),
        version: str = "",
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client: Client = Client(url, **dict(client_options or {}))
        self.model: Model = self.client.model(model, version)
        if inputs is None:
            inputs = list(self.model.spec.inputs)
        self.inputs: dict[str, str] = (
            dict(inputs) if isinstance(inputs, Mapping) else {n: n for n in inputs}
        )
        self.outputs: list[str] = (
            list(self.model.spec.outputs) if outputs is None else list(outputs)
        )
        self.keep: list[str] = list(keep)

    def __call__(self, batch: Batch) -> dict[str, Array]:
        """The outputs (and the kept columns) of one batch, as numpy columns."""
        wanted = [*self.inputs.values(), *self.keep]
        columns = _columns(batch, wanted)
        feed = {name: columns[column] for name, column in self.inputs.items()}
        result = self.model.infer(feed, outputs=self.outputs)
        answer = {column: columns[column] for column in self.keep}
        for name in self.outputs:
            answer[name] = result[name]
        return answer

    def __del__(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()


def _columns(batch: Batch, names: Iterable[str]) -> dict[str, Array]:
    """The named columns of a numpy, pandas or pyarrow batch, as numpy arrays (a column
    of arrays becomes one array with a leading batch axis)."""
    available = _column_names(batch)
    columns = {}
    for name in names:
        if name not in available:
            raise InvalidInputError(
                f"the batch has no column {name!r}; its columns: {sorted(available)}"
            )
        columns[name] = _stacked(_column(batch, name))
    return columns


def _column_names(batch: Batch) -> set[str]:
    if isinstance(batch, Mapping):
        return {str(name) for name in batch}
    if hasattr(batch, "column_names"):  # pyarrow.Table
        return {str(name) for name in batch.column_names}
    if hasattr(batch, "columns"):  # pandas.DataFrame
        return {str(name) for name in batch.columns}
    raise InvalidInputError(
        f"a batch must be a dict of arrays, a pandas DataFrame or a pyarrow Table, "
        f"got {type(batch).__name__}"
    )


def _column(batch: Batch, name: str) -> Any:
    if isinstance(batch, Mapping):
        return batch[name]
    if hasattr(batch, "column_names"):  # pyarrow: tensor columns convert themselves
        column = batch.column(name).combine_chunks()
        return column.to_numpy(zero_copy_only=False)
    return batch[name].to_numpy()


def _stacked(values: Any) -> Array:
    """A column as one array: rows that are arrays (of arrays, for list<list<...>>
    columns read from parquet) are stacked, a batch axis in front."""
    array = np.asarray(values)
    if array.dtype == object and array.size and isinstance(array.flat[0], np.ndarray):
        return np.stack([_stacked(row) for row in array])
    return array
