"""Ensembles and business-logic scripting against the real server: handles, shaping,
splitting and results on `pipeline` (scale, then double) and `bls_scale`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import inference_count


def images(count: int) -> np.ndarray:
    return (np.arange(count * 4) % 251).astype(np.uint8).reshape(count, 2, 2)


def wait_for_requests(server: LocalServer, model: str, before: int, expected: int) -> int:
    """Requests counted since ``before``, once ``expected`` arrived (or 10 s passed): the
    server bumps its counters just after answering."""
    deadline = time.monotonic() + 10
    while inference_count(server, model) - before < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return inference_count(server, model) - before


def test_pipeline_handle(client: Any) -> None:
    model = client.model("pipeline")
    spec = model.spec
    assert model.name == spec.name == "pipeline"
    assert spec.platform == "ensemble"
    assert spec.backend is None
    assert spec.max_batch_size == 4
    assert list(spec.inputs) == ["IMAGE", "SCALE"]
    assert list(spec.outputs) == ["RESULT"]
    assert spec.inputs["IMAGE"] == ts.TensorSpec(name="IMAGE", datatype="UINT8", shape=(2, 2))
    assert spec.inputs["SCALE"].datatype == "FP32"
    assert spec.inputs["SCALE"].shape == (1,)
    assert spec.inputs["IMAGE"].dtype == np.uint8
    assert spec.outputs["RESULT"].shape == (2, 2)
    assert spec.outputs["RESULT"].dtype == np.float32
    assert not spec.decoupled
    assert not spec.sequence


def test_pipeline_infer_batched(client: Any) -> None:
    model = client.model("pipeline")
    batch = images(3)
    scales = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    result = model.infer(IMAGE=batch, SCALE=scales)
    out = result["RESULT"]
    assert out.shape == (3, 2, 2)
    assert out.dtype == np.float32
    assert np.array_equal(out, 2 * batch.astype(np.float32) * scales[:, None, None])
    assert result.model_name == "pipeline"
    assert list(result) == ["RESULT"]
    # Scales given with their trailing size-1 axis are the same batch.
    same = model.infer(IMAGE=batch, SCALE=scales[:, None])["RESULT"]
    assert np.array_equal(same, out)


def test_pipeline_infer_sample(client: Any) -> None:
    model = client.model("pipeline")
    image = images(1)[0]
    sample = model.infer_sample(IMAGE=image, SCALE=1.5)
    assert sample["RESULT"].shape == (2, 2)
    assert np.array_equal(sample["RESULT"], 2 * image.astype(np.float32) * np.float32(1.5))
    # A single sample given to infer gets a batch axis of one.
    single = model.infer(IMAGE=image, SCALE=[1.5])["RESULT"]
    assert single.shape == (1, 2, 2)
    assert np.array_equal(single[0], sample["RESULT"])


def test_pipeline_batch_of_ten_is_split_into_chunks(client: Any, server: LocalServer) -> None:
    model = client.model("pipeline")
    batch = images(10)
    scales = np.arange(1, 11, dtype=np.float32)
    before = {name: inference_count(server, name) for name in ("pipeline", "scale", "double")}
    out = model.infer(IMAGE=batch, SCALE=scales)["RESULT"]
    assert out.shape == (10, 2, 2)
    assert np.array_equal(out, 2 * batch.astype(np.float32) * scales[:, None, None])
    # Three requests (4 + 4 + 2), each running both steps of the ensemble.
    for name in ("pipeline", "scale", "double"):
        assert wait_for_requests(server, name, before[name], 3) == 3, name


def test_pipeline_casts_python_ints_to_uint8(client: Any, server: LocalServer) -> None:
    model = client.model("pipeline")
    result = model.infer(IMAGE=[[[0, 1], [254, 255]]], SCALE=[2])
    assert result["RESULT"].tolist() == [[[0.0, 4.0], [1016.0, 1020.0]]]
    sample = model.infer_sample(IMAGE=[[1, 2], [3, 4]], SCALE=3)
    assert sample["RESULT"].tolist() == [[6.0, 12.0], [18.0, 24.0]]
    before = inference_count(server, "pipeline")
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE' is UINT8: value 256"):
        model.infer_sample(IMAGE=[[1, 2], [3, 256]], SCALE=1)
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE' is UINT8: value -1"):
        model.infer_sample(IMAGE=[[1, 2], [3, -1]], SCALE=1)
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE' is UINT8"):
        model.infer_sample(IMAGE=[[1.5, 2], [3, 4]], SCALE=1)
    with pytest.raises(ts.InvalidInputError, match=r"'IMAGE'.*\[2, 2\]"):
        model.infer_sample(IMAGE=[1, 2, 3, 4], SCALE=1)
    assert inference_count(server, "pipeline") == before


def test_pipeline_map(client: Any) -> None:
    model = client.model("pipeline")
    batch = images(9)
    samples = [{"IMAGE": batch[index], "SCALE": float(index)} for index in range(9)]
    results = list(model.map(samples))
    assert len(results) == 9
    for index, result in enumerate(results):
        assert result["RESULT"].shape == (2, 2)
        assert np.array_equal(result["RESULT"], 2 * batch[index].astype(np.float32) * index)


def test_bls_handle(client: Any) -> None:
    spec = client.model("bls_scale").spec
    assert spec.backend == "python"
    assert spec.platform != "ensemble"
    assert spec.max_batch_size == 4
    assert list(spec.inputs) == ["IMAGE", "SCALE"]
    assert list(spec.outputs) == ["PLUS_ONE"]
    assert spec.outputs["PLUS_ONE"].shape == (2, 2)


def test_bls_results(client: Any, server: LocalServer) -> None:
    model = client.model("bls_scale")
    batch = images(3)
    scales = np.array([2.0, 0.5, 3.0], dtype=np.float32)
    out = model.infer(IMAGE=batch, SCALE=scales)["PLUS_ONE"]
    assert out.shape == (3, 2, 2)
    assert out.dtype == np.float32
    assert np.array_equal(out, batch.astype(np.float32) * scales[:, None, None] + 1)
    sample = model.infer_sample(IMAGE=[[1, 2], [3, 4]], SCALE=2)["PLUS_ONE"]
    assert sample.tolist() == [[3.0, 5.0], [7.0, 9.0]]
    # A batch over max_batch_size is split; each chunk calls `scale` from inside the model.
    big = images(6)
    before = inference_count(server, "bls_scale")
    split = model.infer(IMAGE=big, SCALE=np.full(6, 2.0))["PLUS_ONE"]
    assert np.array_equal(split, big.astype(np.float32) * 2 + 1)
    assert wait_for_requests(server, "bls_scale", before, 2) == 2


async def test_async_pipeline_and_bls_concurrently(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        pipeline, bls = await asyncio.gather(client.model("pipeline"), client.model("bls_scale"))
        batch = images(5)
        scales = np.full(5, 2.0, dtype=np.float32)
        doubled, plus_one = await asyncio.gather(
            pipeline.infer(IMAGE=batch, SCALE=scales), bls.infer(IMAGE=batch, SCALE=scales)
        )
        assert np.array_equal(doubled["RESULT"], batch.astype(np.float32) * 4)
        assert np.array_equal(plus_one["PLUS_ONE"], batch.astype(np.float32) * 2 + 1)
