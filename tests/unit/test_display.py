"""How specs, results, statistics, metrics and errors show in a notebook (HTML) and in
IPython (text)."""

from __future__ import annotations

from typing import Any

import numpy as np
from IPython.lib.pretty import pretty as ipython_pretty

import triton_sdk as ts
from triton_sdk._display import preview


def pretty(thing: Any) -> str:
    """What IPython shows (its pretty printer picks the method along the MRO)."""
    return ipython_pretty(thing)  # type: ignore[no-any-return]


SPEC = ts.ModelSpec(
    name="embed<script>",
    backend="python",
    max_batch_size=8,
    dynamic_batching=True,
    inputs={"TEXT": ts.TensorSpec(name="TEXT", datatype="BYTES", shape=(1,))},
    outputs={"OUTPUT": ts.TensorSpec(name="OUTPUT", datatype="FP32", shape=(768,))},
)


def test_a_spec_shows_its_tensors() -> None:
    text = pretty(SPEC)
    assert text.splitlines()[0] == "embed<script>  (python, max_batch_size 8, dynamic batching)"
    assert "input   TEXT    BYTES     [1]" in text
    assert "output  OUTPUT  FP32      [768]" in text
    assert SPEC.describe() == text
    page = SPEC._repr_html_()
    assert "<table>" in page
    assert "embed&lt;script&gt;" in page  # escaped
    assert "<script>" not in page


def test_a_result_shows_each_output_with_a_preview() -> None:
    result = ts.InferResult(
        {"Y": np.arange(1000, dtype=np.float32).reshape(10, 100)},
        datatypes={"Y": "FP32"},
        model_name="m",
        model_version="1",
        id="r7",
    )
    text = pretty(result)
    assert text.splitlines()[0] == "InferResult of 'm' version 1, request 'r7'"
    assert "Y       FP32      [10, 100]" in text
    assert "..." in text  # a preview, not a thousand values
    assert "<td style='text-align:left'><code>[10, 100]</code></td>" in result._repr_html_()


def test_a_long_bytes_element_is_cut_in_the_preview() -> None:
    # A 2 MB text output was shown whole, in the cell and in the text view.
    document = "x" * 2_000_000
    result = ts.InferResult(
        {"TEXT": np.array([document.encode(), b"short"], dtype=object)},
        datatypes={"TEXT": "BYTES"},
        model_name="m",
        model_version="1",
    )
    assert len(result._repr_html_()) < 2_000
    text = pretty(result)
    assert len(text) < 1_000
    assert "b'xxxxxxxx" in text
    assert "…" in text
    assert "b'short'" in text  # short elements are shown whole
    strings = np.array([document, "short"])  # numpy str arrays, as previews of inputs
    assert len(preview(strings)) < 200


def test_many_short_axes_are_previewed_in_a_few_values() -> None:
    # numpy shortens only axes longer than 4: 5**10 values were all shown (39 MB of HTML).
    values = np.arange(5**10, dtype=np.float32).reshape((5,) * 10)
    result = ts.InferResult(
        {"Y": values}, datatypes={"Y": "FP32"}, model_name="m", model_version="1"
    )
    assert len(result._repr_html_()) < 2_000
    assert preview(values) == "[0. 1. 2. 3. ...]"
    assert (
        preview(np.arange(16).reshape(4, 4)) == "[[ 0 1 2 3] [ 4 5 6 7] [ 8 9 10 11] [12 13 14 15]]"
    )


def test_statistics_show_the_phases_that_happened() -> None:
    stats = ts.ModelStatistics(
        name="m",
        version="1",
        inference_count=8,
        execution_count=2,
        inference=ts.InferenceStatistics(
            success=ts.DurationStatistics(count=2, total_ns=4_000_000),
        ),
        batches=(
            ts.BatchStatistics(
                batch_size=4, compute_infer=ts.DurationStatistics(count=2, total_ns=2_000_000)
            ),
        ),
    )
    text = pretty(stats)
    assert text.splitlines()[0] == "m version 1: 8 inferences, 2 executions"
    assert "  success     2      2.000" in text
    assert "  batch of 4  2      1.000" in text
    assert "fail" not in text  # it never happened


def test_metrics_show_one_row_per_model() -> None:
    metrics = ts.ServerMetrics(
        models=(ts.ModelMetrics(model="m", version="1", request_success=5),),
        server={"nv_cpu_utilization": 0.5},
    )
    text = pretty(metrics)
    assert text.splitlines()[0] == "ServerMetrics: 1 model versions, 1 server samples"
    assert "m      1        5" in text


def test_an_error_shows_its_fields() -> None:
    error = ts.ServerOverloadedError("queue full", status=503, model="m", retryable=True)
    text = pretty(error)
    assert text.splitlines()[0] == "ServerOverloadedError"
    assert "retryable     True" in text
    assert "<code>503</code>" in error._repr_html_()


def test_a_long_error_message_is_cut_in_the_display_only() -> None:
    # A model's traceback was shown whole: 5,000 characters made 5.9 kB of HTML.
    error = ts.InferenceError("x" * 5000, status=500)
    assert "x" * 2000 + "... (3000 more characters)" in pretty(error)
    assert "x" * 2001 not in error._repr_html_()
    assert str(error) == "x" * 5000


def test_ipython_shows_the_table_of_every_displayable_type() -> None:
    """A class's own __repr__ (attrs makes one) must not hide the table from IPython."""
    result = ts.InferResult(
        {"Y": np.arange(3.0)}, datatypes={"Y": "FP64"}, model_name="m", model_version="1"
    )
    things = [
        SPEC,
        result,
        ts.InferenceError("boom", status=500),
        ts.ModelStatistics(name="m", version="1"),
        ts.ServerMetrics(),
    ]
    for thing in things:
        assert pretty(thing) == thing._table().text(), type(thing).__name__
        assert pretty(thing) != repr(thing)
