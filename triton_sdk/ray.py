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
once (a model without a batch axis gets a request per row, through ``model.map``).
Batches may come as numpy (``{"column": array}``), pandas or pyarrow; the answer is
numpy columns: the outputs, and the columns named in ``keep``. ``ray`` itself is needed
only to run the Dataset (``pip install "triton-sdk-py[ray]"``); this module does not import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np

from ._client import Client, Model
from ._errors import InvalidInputError
from ._result import Array
from ._shaping import first_element, rows_of_numbers

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
        clash = sorted(set(self.keep) & set(self.outputs))
        if clash:  # (the output would replace the column in the answer)
            raise InvalidInputError(
                f"keep names {', '.join(map(repr, clash))}, an output of model "
                f"{self.model.name!r} too: the answer holds one column of a name",
                model=self.model.name,
            )

    def __call__(self, batch: Batch) -> dict[str, Array]:
        """The outputs (and the kept columns) of one batch, as numpy columns: row ``i``
        of each output is the answer to row ``i`` of the batch."""
        batched = self.model.spec.batched
        wanted = [*self.inputs.values(), *self.keep] if batched else self.keep
        columns = _columns(batch, wanted)
        answer = {column: columns[column] for column in self.keep}
        if batched:
            feed = {
                name: self._rows(name, column, columns[column])
                for name, column in self.inputs.items()
            }
            result = self.model.infer(feed, outputs=self.outputs)
            answer.update((name, result[name]) for name in self.outputs)
        else:  # (each row on its own: rows of a [-1] input may differ in length)
            rows = _columns(batch, self.inputs.values(), stack=False)
            answer.update(self._one_by_one({n: rows[c] for n, c in self.inputs.items()}))
        return answer

    def _one_by_one(self, feed: dict[str, list[Array]]) -> dict[str, Array]:
        """The outputs of a model without a batch axis: a request per row (``map``), the
        answers stacked row by row."""
        lengths = {column: len(values) for column, values in feed.items()}
        if len(set(lengths.values())) > 1:
            raise InvalidInputError(
                f"the batch's columns have different numbers of rows: {lengths}",
                model=self.model.name,
            )
        rows = next(iter(lengths.values()), 0)
        samples = ({name: values[row] for name, values in feed.items()} for row in range(rows))
        results = list(self.model.map(samples, outputs=self.outputs))
        stacked: dict[str, Array] = {}
        for name in self.outputs:
            answers = [result[name] for result in results]
            if not answers:  # (no rows: the output's declared shape, of none)
                declared = self.model.spec.outputs.get(name)
                dims = () if declared is None else tuple(max(dim, 0) for dim in declared.shape)
                dtype = object if declared is None else declared.dtype
                stacked[name] = np.empty((0, *dims), dtype)
                continue
            if len({answer.shape for answer in answers}) > 1:
                # Rows of different shapes: a column of arrays, as Ray Data holds tensors
                # of variable shape.
                ragged = np.empty(len(answers), dtype=object)
                for row, answer in enumerate(answers):
                    ragged[row] = answer
                stacked[name] = ragged
            else:
                stacked[name] = np.stack(answers)
        return stacked

    def _rows(self, name: str, column: str, values: Array) -> Array:
        """``values`` with one row per sample of input ``name``: a batch axis in front of
        the input's dims (a column of scalars for an input of one element gets them).
        Anything else would be read as one sample, and the answer would not line up with
        the batch's rows."""
        dims = self.model.spec.inputs[name].shape
        if values.ndim == len(dims) + 1 and all(
            dim in (-1, given) for dim, given in zip(dims, values.shape[1:], strict=True)
        ):
            return values
        if values.ndim == len(dims) and all(dim in (1, -1) for dim in dims) and dims:
            return values.reshape(len(values), *(1 for _ in dims))
        raise InvalidInputError(
            f"column {column!r} has {len(values) if values.ndim else 1} rows of shape "
            f"{list(values.shape[1:])}, but input {name!r} of model {self.model.name!r} "
            f"takes {list(dims)} per sample: each row of the batch is one sample",
            model=self.model.name,
        )

    def __del__(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()


@overload
def _columns(batch: Batch, names: Iterable[str]) -> dict[str, Array]: ...
@overload
def _columns(
    batch: Batch, names: Iterable[str], *, stack: Literal[False]
) -> dict[str, list[Array]]: ...
def _columns(
    batch: Batch, names: Iterable[str], *, stack: bool = True
) -> dict[str, Array] | dict[str, list[Array]]:
    """The named columns of a numpy, pandas or pyarrow batch, as numpy arrays (a column
    of arrays becomes one array with a leading batch axis); ``stack=False``: as a list of
    the rows' arrays."""
    available = _column_labels(batch)
    columns: dict[str, Any] = {}
    for name in names:
        if name not in available:
            raise InvalidInputError(
                f"the batch has no column {name!r}; its columns: {sorted(available)}"
            )
        values = _column(batch, available[name])
        try:
            columns[name] = _stacked(values) if stack else [_stacked(row) for row in values]
        except ValueError as exc:  # (rows of different shapes)
            raise InvalidInputError(f"column {name!r}: {exc}") from exc
    return columns


def _column_labels(batch: Batch) -> dict[str, Any]:
    """Each column's label as a ``str`` (how ``inputs`` and ``keep`` name it), and the
    label itself (a DataFrame's may be an int)."""
    if isinstance(batch, Mapping):
        labels: Iterable[Any] = batch
    elif hasattr(batch, "column_names"):  # pyarrow.Table, RecordBatch
        labels = batch.column_names
    elif hasattr(batch, "columns"):  # pandas.DataFrame
        labels = batch.columns
    else:
        raise InvalidInputError(
            f"a batch must be a dict of arrays, a pandas DataFrame or a pyarrow Table, "
            f"got {type(batch).__name__}"
        )
    return {str(label): label for label in labels}


def _column(batch: Batch, label: Any) -> Any:
    if isinstance(batch, Mapping):
        return batch[label]
    if hasattr(batch, "column_names"):  # pyarrow: tensor columns convert themselves
        column = batch.column(label)
        if hasattr(column, "combine_chunks"):  # (a Table's; a RecordBatch's is one piece)
            column = column.combine_chunks()
        return column.to_numpy(zero_copy_only=False)
    return batch[label].to_numpy()


def _stacked(values: Any) -> Array:
    """A column as one array: rows that are arrays (of arrays, for list<list<...>>
    columns read from parquet) are stacked, a batch axis in front."""
    array = np.asarray(values)
    first = first_element(array)
    if isinstance(first, np.ndarray):
        return np.stack([_stacked(row) for row in array])
    if isinstance(first, list | tuple):
        rows = rows_of_numbers(array)  # (rows that are lists: a DataFrame column from JSON)
        if rows is not None:
            return rows
        # Anything else keeps its elements as they are (numpy would make text of numbers
        # and drop the trailing NULs of bytes), for the input's check; booleans among
        # numbers are refused there.
        kept: Array = np.array(array.tolist(), dtype=object)
        if kept.ndim > array.ndim:
            return kept
    return array
