"""Classification against the real server: top-k classes, labels, batching, refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import inference_count

# The classifier's weights (tests/models/classifier/1/model.py) and labels.txt.
WEIGHTS = np.array(
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.5]], dtype=np.float32
)
LABELS = ["cat", "dog", "bird"]
# Triton prints the scores with six significant digits.
SCORE_TOLERANCE = 1e-5


def softmax_scores(features: np.ndarray) -> np.ndarray:
    logits = features.astype(np.float32) @ WEIGHTS
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def expected_top(features: np.ndarray, top_k: int) -> list[list[tuple[int, str, float]]]:
    """Per sample, (index, label, score) of the top_k classes, best first."""
    scores = softmax_scores(features)
    expected = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[:top_k]
        expected.append([(int(index), LABELS[index], float(row[index])) for index in order])
    return expected


def check(classes: list[list[ts.Classification]], expected: list[Any]) -> None:
    assert len(classes) == len(expected)
    for sample, wanted in zip(classes, expected, strict=True):
        assert [(c.index, c.label) for c in sample] == [(i, label) for i, label, _ in wanted]
        for got, (_, _, score) in zip(sample, wanted, strict=True):
            assert isinstance(got, ts.Classification)
            assert isinstance(got.score, float)
            assert got.score == pytest.approx(score, abs=SCORE_TOLERANCE)
        scores = [c.score for c in sample]
        assert scores == sorted(scores, reverse=True)


def distinct_features(count: int, seed: int = 7) -> np.ndarray:
    """Features whose class scores are well apart (no ties to order arbitrarily)."""
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) < count:
        row = rng.uniform(-3, 3, size=4).astype(np.float32)
        scores = np.sort(softmax_scores(row[None])[0])
        if np.min(np.diff(scores)) > 0.01:
            rows.append(row)
    return np.stack(rows)


def test_top_k_with_labels_best_first(client: Any) -> None:
    model = client.model("classifier")
    features = distinct_features(3)
    classes = model.classify(top_k=2, output="SCORES", FEATURES=features)
    check(classes, expected_top(features, 2))
    assert all(len(sample) == 2 for sample in classes)


def test_top_k_computed_with_numpy(client: Any) -> None:
    # An np.int64 reached HTTP's JSON encoder, which cannot write one.
    features = distinct_features(2)
    classes = client.model("classifier").classify(top_k=np.int64(2), FEATURES=features)
    check(classes, expected_top(features, 2))


def test_every_class_in_order(client: Any) -> None:
    model = client.model("classifier")
    features = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [0, 5, 0, 0]], dtype=np.float32)
    classes = model.classify(top_k=3, FEATURES=features)
    check(classes, expected_top(features, 3))
    assert [c.label for c in classes[0]] == ["bird", "dog", "cat"]
    assert [c.label for c in classes[1]] == ["cat", "dog", "bird"]
    assert classes[2][0].label == "dog"
    for sample in classes:
        assert sum(c.score for c in sample) == pytest.approx(1.0, abs=1e-4)


def test_default_top_k_is_one(client: Any) -> None:
    features = distinct_features(4, seed=11)
    classes = client.model("classifier").classify(FEATURES=features)
    check(classes, expected_top(features, 1))


def test_batch_larger_than_max_batch_size(client: Any) -> None:
    model = client.model("classifier")
    assert model.spec.max_batch_size == 8
    features = distinct_features(11, seed=3)
    classes = model.classify(top_k=2, FEATURES=features)
    check(classes, expected_top(features, 2))


def test_single_sample(client: Any) -> None:
    model = client.model("classifier")
    features = np.array([1, 2, 3, 4], dtype=np.float32)
    classes = model.classify(top_k=3, FEATURES=features)
    assert len(classes) == 1
    check(classes, expected_top(features[None], 3))
    # Python floats work as well (cast to FP32).
    assert model.classify(top_k=3, FEATURES=[1.0, 2.0, 3.0, 4.0]) == classes


def test_output_is_optional_for_a_single_output_model(client: Any) -> None:
    model = client.model("classifier")
    features = distinct_features(2, seed=5)
    assert model.classify(top_k=2, FEATURES=features) == model.classify(
        top_k=2, output="SCORES", FEATURES=features
    )


def test_top_k_larger_than_the_classes_gives_every_class(client: Any) -> None:
    features = np.array([[1, 2, 3, 4]], dtype=np.float32)
    classes = client.model("classifier").classify(top_k=10, FEATURES=features)
    check(classes, expected_top(features, 3))


@pytest.mark.parametrize("top_k", [0, -1])
def test_top_k_below_one_is_refused_and_nothing_sent(
    client: Any, server: LocalServer, top_k: int
) -> None:
    model = client.model("classifier")
    before = inference_count(server, "classifier")
    with pytest.raises(ts.InvalidInputError, match="top_k"):
        model.classify(top_k=top_k, FEATURES=[1.0, 2.0, 3.0, 4.0])
    assert inference_count(server, "classifier") == before


def test_unknown_output_is_refused(client: Any, server: LocalServer) -> None:
    model = client.model("classifier")
    before = inference_count(server, "classifier")
    with pytest.raises(ts.InvalidInputError, match=r"'NOPE'.*'SCORES'"):
        model.classify(top_k=1, output="NOPE", FEATURES=[1.0, 2.0, 3.0, 4.0])
    assert inference_count(server, "classifier") == before


def test_several_outputs_need_output_named(client: Any, server: LocalServer) -> None:
    model = client.model("add_sub")
    inputs = {"INPUT0": [1.0, 5.0, 2.0, 3.0], "INPUT1": [0.0, 0.0, 0.0, 0.0]}
    before = inference_count(server, "add_sub")
    with pytest.raises(ts.InvalidInputError, match=r"output=.*'OUTPUT0', 'OUTPUT1'"):
        model.classify(top_k=2, **inputs)
    assert inference_count(server, "add_sub") == before
    # A model without a batch axis: one request, one list of classes.
    classes = model.classify(top_k=2, output="OUTPUT0", **inputs)
    assert [(c.index, c.score, c.label) for c in classes[0]] == [(1, 5.0, None), (3, 3.0, None)]
    assert len(classes) == 1


def test_model_without_label_file_has_no_labels(client: Any) -> None:
    model = client.model("double")
    assert model.spec.outputs["Y"].label_filename is None
    x = np.array([[[1, 4], [3, 2]], [[8, 5], [6, 7]]], dtype=np.float32)
    classes = model.classify(top_k=3, X=x)
    # Classes index the flattened output, here Y = 2 * X.
    assert [[(c.index, c.score) for c in sample] for sample in classes] == [
        [(1, 8.0), (2, 6.0), (3, 4.0)],
        [(0, 16.0), (3, 14.0), (2, 12.0)],
    ]
    assert all(c.label is None for sample in classes for c in sample)


def test_embedding_without_labels(client: Any) -> None:
    model = client.model("text_embed")
    texts = ["hello", "bonjour"]
    embeddings = model.infer(TEXT=texts)["OUTPUT"]
    classes = model.classify(top_k=4, TEXT=texts)
    assert len(classes) == 2
    for sample, row in zip(classes, embeddings, strict=True):
        assert len(sample) == 4
        assert all(c.label is None for c in sample)
        for c in sample:
            assert c.score == pytest.approx(float(row[c.index]), abs=SCORE_TOLERANCE)
        assert sample[0].score == pytest.approx(float(row.max()), abs=SCORE_TOLERANCE)
        assert [c.score for c in sample] == sorted((c.score for c in sample), reverse=True)


@pytest.mark.parametrize(
    "datatype",
    ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP32", "FP64"],
)
def test_every_numeric_datatype_the_server_ranks(client: Any, datatype: str) -> None:
    classes = client.model("all_dtypes").classify(
        {f"IN_{datatype}": [[3, 1, 2]]}, top_k=2, output=f"OUT_{datatype}"
    )
    assert [(c.index, c.score) for c in classes[0]] == [(0, 3.0), (2, 2.0)]


@pytest.mark.parametrize(
    ("datatype", "values"),
    [("INT64", [2**53 + 1, 2**53, -(2**63)]), ("UINT64", [2**64 - 1, 2**64 - 2, 5])],
)
def test_integer_scores_are_exact(client: Any, datatype: str, values: list[int]) -> None:
    # They were read as floats: past 2**53 two classes showed one rounded score.
    classes = client.model("all_dtypes").classify(
        {f"IN_{datatype}": [values]}, top_k=3, output=f"OUT_{datatype}"
    )
    assert [(c.index, c.score) for c in classes[0]] == [
        (0, values[0]),
        (1, values[1]),
        (2, values[2]),
    ]
    assert all(type(c.score) is int for c in classes[0])


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("BYTES", [["b", "a"]]), ("BOOL", [[True, False]]), ("FP16", [[1.0]]), ("BF16", [[1.0]])],
)
def test_outputs_the_server_cannot_rank_are_refused_and_nothing_sent(
    client: Any, server: LocalServer, datatype: str, value: Any
) -> None:
    # A BYTES output took tritonserver 2.51 down; the others it refuses as it runs them.
    model = client.model("all_dtypes")
    before = inference_count(server, "all_dtypes")
    with pytest.raises(
        ts.InvalidInputError, match=f"'OUT_{datatype}' of 'all_dtypes' is {datatype}"
    ):
        model.classify({f"IN_{datatype}": value}, output=f"OUT_{datatype}")
    assert inference_count(server, "all_dtypes") == before
    assert client.is_ready()


def test_classifying_what_no_input_fed_is_refused_and_nothing_sent(
    client: Any, server: LocalServer
) -> None:
    # Triton's HTTP endpoint died classifying the empty output (gRPC answered no classes).
    model = client.model("all_dtypes")
    before = inference_count(server, "all_dtypes")
    empty = np.zeros((2, 0), np.int32)
    with pytest.raises(ts.InvalidInputError, match="input 'IN_INT32' of 'all_dtypes' is empty"):
        model.classify(IN_INT32=empty, output="OUT_INT32", top_k=2)
    # An empty input beside one with values: which output it feeds, the model knows (here
    # OUT_INT8, which HTTP crashed classifying): refused too.
    with pytest.raises(ts.InvalidInputError, match="input 'IN_INT8' of 'all_dtypes' is empty"):
        model.classify(IN_INT8=np.zeros((1, 0), np.int8), IN_FP32=[[1.0]], output="OUT_INT8")
    assert inference_count(server, "all_dtypes") == before
    assert client.is_ready()
    ranked = model.classify(IN_INT32=[[1, 5, 3]], output="OUT_INT32")
    assert ranked[0][0].index == 1
