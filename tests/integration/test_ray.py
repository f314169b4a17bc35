"""Ray Data over a fleet of real servers: ``map_batches`` with TritonPredictor on a local
Ray cluster, with numpy, pandas and pyarrow batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from triton_sdk.local import LocalServer

from .conftest import inference_count
from .test_fleet import fleet

ray = pytest.importorskip("ray")

from triton_sdk.ray import TritonPredictor  # noqa: E402

__all__ = ["fleet"]  # the module's servers, used here too

# Ray's own code warns of its own deprecations; they are not this project's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")

ROWS = 48


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def dataset() -> Any:
    rows = [{"id": i, "pixels": np.full((2, 2), i, dtype=np.float32)} for i in range(ROWS)]
    return ray.data.from_items(rows)


@pytest.mark.parametrize("batch_format", ["numpy", "pandas", "pyarrow"])
def test_map_batches_runs_every_row_through_the_fleet(
    ray_cluster: None, fleet: list[LocalServer], batch_format: str
) -> None:
    urls = [server.grpc_url for server in fleet]
    before = [inference_count(server, "double") for server in fleet]
    scored = dataset().map_batches(
        TritonPredictor,
        fn_constructor_args=(urls, "double"),
        fn_constructor_kwargs={"inputs": {"X": "pixels"}, "keep": ["id"]},
        concurrency=2,
        batch_size=8,
        batch_format=batch_format,
    )
    rows = sorted(scored.take_all(), key=lambda row: int(row["id"]))
    assert [int(row["id"]) for row in rows] == list(range(ROWS))
    for row in rows:
        assert set(row) == {"id", "Y"}
        assert np.array_equal(np.asarray(row["Y"]), np.full((2, 2), 2 * row["id"]))
    after = [inference_count(server, "double") for server in fleet]
    ran = [now - was for now, was in zip(after, before, strict=True)]
    # double has max_batch_size 4: each batch of 8 is two requests, spread over the fleet.
    assert sum(ran) == ROWS // 4
    assert sum(1 for count in ran if count) >= 2, ran


def test_a_missing_column_is_named(fleet: list[LocalServer]) -> None:
    predictor = TritonPredictor(fleet[0].grpc_url, "double")
    with pytest.raises(Exception, match="no column 'X'"):
        predictor({"pixels": np.ones((1, 2, 2), dtype=np.float32)})
    answer = predictor({"X": np.ones((3, 2, 2), dtype=np.float32)})
    assert list(answer) == ["Y"]
    assert np.array_equal(answer["Y"], np.full((3, 2, 2), 2, dtype=np.float32))


def test_a_pyarrow_column_of_nested_lists_is_stacked(fleet: list[LocalServer]) -> None:
    """2-D samples read from parquet are list<list<...>> columns, not tensor columns."""
    import pyarrow as pa

    predictor = TritonPredictor(fleet[0].grpc_url, "double")
    table = pa.table({"X": [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]})
    answer = predictor(table)
    expected = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2) * 2
    assert np.array_equal(answer["Y"], expected)


def test_each_output_row_answers_a_row_of_the_batch(server: LocalServer) -> None:
    import pandas as pd
    import pyarrow as pa

    import triton_sdk as ts

    # A column of 3 scalars for an input of [-1] per sample went as one sample: one row
    # of 3 values came back for 3 rows of ids. A row each, now; a column whose rows
    # cannot be the input's samples is refused.
    frame = pd.DataFrame({"id": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
    vectors = TritonPredictor(
        server.grpc_url, "all_dtypes", inputs={"IN_FP32": "x"}, outputs=["OUT_FP32"]
    )
    assert vectors(frame)["OUT_FP32"].tolist() == [[1.0], [2.0], [3.0]]  # (a row each)
    matrices = TritonPredictor(server.grpc_url, "double", inputs={"X": "x"})
    with pytest.raises(ts.InvalidInputError, match=r"column 'x' has 3 rows of shape \[\]"):
        matrices(frame)
    # A column of scalars for an input of one element: a row each.
    scaled = TritonPredictor(
        server.grpc_url, "scale", inputs={"IMAGE": "image", "SCALE": "s"}, keep=["id"]
    )
    images = np.ones((3, 2, 2), np.uint8)
    answer = scaled({"id": np.array([7, 8, 9]), "image": images, "s": np.array([1.0, 2.0, 3.0])})
    assert answer["OUT"].shape == (3, 2, 2)
    assert answer["OUT"][:, 0, 0].tolist() == [1.0, 2.0, 3.0]
    # Rows of another fixed shape are refused naming the column (it named only the input).
    pairs_for_one = {"id": np.array([7]), "image": images[:1], "s": np.array([[1.0, 2.0]])}
    with pytest.raises(ts.InvalidInputError, match=r"column 's' has 1 rows of shape \[2\]"):
        scaled(pairs_for_one)
    # Columns labelled by ints, a RecordBatch, and ragged rows (a raw ValueError before).
    doubled = TritonPredictor(server.grpc_url, "double", inputs={"X": "0"})
    assert doubled(pd.DataFrame({0: list(np.ones((2, 2, 2), np.float32))}))["Y"].shape == (2, 2, 2)
    table = pa.record_batch({"0": [[[1.0, 2.0], [3.0, 4.0]]]})
    assert doubled(table)["Y"].tolist() == [[[2.0, 4.0], [6.0, 8.0]]]
    # A column whose rows are lists (JSON, df.apply) is stacked as one of arrays.
    listed = pd.DataFrame({"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]})
    pairs = TritonPredictor(
        server.grpc_url, "all_dtypes", inputs={"IN_FP32": "x"}, outputs=["OUT_FP32"]
    )
    assert pairs(listed)["OUT_FP32"].tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    ragged = {0: [np.ones((2, 2), np.float32), np.ones((3, 2), np.float32)]}
    with pytest.raises(ts.InvalidInputError, match="column '0'"):
        doubled(pd.DataFrame(ragged))


def test_a_model_without_a_batch_axis_gets_a_request_per_row(server: LocalServer) -> None:
    import triton_sdk as ts

    # The whole batch went as one sample: refused for add_sub ([4] per sample, got (2, 4)),
    # and for zeros one row in gave five "rows" out.
    adder = TritonPredictor(server.grpc_url, "add_sub", keep=["id"])
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    answer = adder({"id": np.array([1, 2]), "INPUT0": rows, "INPUT1": np.ones((2, 4), np.float32)})
    assert answer["id"].tolist() == [1, 2]
    assert answer["OUTPUT0"].tolist() == (rows + 1).tolist()
    counted = TritonPredictor(server.grpc_url, "zeros", keep=["id"])
    answer = counted({"COUNT": np.array([[3], [3]]), "id": np.array([1, 2])})
    assert answer["OUT"].shape[0] == 2
    # Rows of other shapes (in and out): a column of arrays, as Ray holds variable tensors.
    ragged = counted({"COUNT": np.array([[3], [5]]), "id": np.array([1, 2])})["OUT"]
    assert ragged.dtype == object
    assert [row.shape for row in ragged] == [(3,), (5,)]
    upper = TritonPredictor(server.grpc_url, "upper")
    texts = upper({"TEXT": np.array([["a", "b"], ["c"]], dtype=object)})["UPPER"]
    assert [row.tolist() for row in texts] == [[b"A", b"B"], [b"C"]]
    # Rows one by one: columns of different lengths are refused, not cut to the shortest.
    with pytest.raises(ts.InvalidInputError, match="different numbers of rows"):
        adder({"id": np.array([1]), "INPUT0": rows, "INPUT1": np.ones((3, 4), np.float32)})
    empty = np.ones((0, 4), np.float32)
    assert adder({"id": np.array([]), "INPUT0": empty, "INPUT1": empty})["OUTPUT0"].shape == (0, 4)


def test_a_kept_column_named_as_an_output_is_refused(server: LocalServer) -> None:
    import triton_sdk as ts

    # The output replaced the kept column in the answer, without a word.
    with pytest.raises(ts.InvalidInputError, match="keep names 'Y', an output of model"):
        TritonPredictor(server.grpc_url, "double", keep=["Y"])
