"""Usage examples of the public API, checked by mypy --strict (never executed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import triton_sdk as ts


def sync_usage(url: str) -> npt.NDArray[np.float32]:
    with ts.Client(
        url, timeout=30.0, retry=ts.RetryPolicy(max_attempts=5, deadline=10.0)
    ) as client:
        live: bool = client.is_live()
        ready: bool = client.is_ready()
        client.wait_until_ready(timeout=5.0)
        meta: ts.ServerMetadata = client.server_metadata()
        extensions: tuple[str, ...] = meta.extensions
        statuses: list[ts.ModelStatus] = client.models()
        first_version: str | None = statuses[0].version if statuses else None
        model: ts.Model = client.model("text_embed")
        spec: ts.ModelSpec = model.spec
        text: ts.TensorSpec = spec.inputs["TEXT"]
        dtype: np.dtype[Any] = text.dtype
        batch: int = spec.max_batch_size
        result: ts.InferResult = model.infer(TEXT=["hello"], timeout=5.0, request_id="r1")
        same: ts.InferResult = model.infer({"TEXT": np.array([["hello"]], dtype=object)})
        sample: ts.InferResult = model.infer_sample(TEXT="hello", outputs=["OUTPUT"])
        names: list[str] = list(result)
        strings = same.to_dict()
        del live, ready, extensions, first_version, dtype, batch, sample, names, strings
        output: npt.NDArray[np.float32] = result["OUTPUT"]
        return output


async def async_usage(url: str) -> list[str]:
    async with ts.AsyncClient(url, headers={"authorization": "Bearer token"}) as client:
        if not await client.is_ready():
            await client.wait_until_ready(timeout=5.0)
        model: ts.AsyncModel = await client.model("text_embed", "1")
        result = await model.infer(TEXT=["a", "b"], retry=ts.RetryPolicy.none(), timeout=None)
        await client.load_model("text_embed", config={"max_batch_size": 4})
        await client.unload_model("text_embed")
        return [str(item) for item in result.as_strings("OUTPUT").reshape(-1)]


def errors(model: ts.Model) -> str:
    try:
        model.infer(TEXT=[1, 2])
    except ts.InvalidInputError as exc:
        return exc.message
    except ts.InferenceError as exc:
        status: str | int | None = exc.status
        return f"{exc.model} {exc.request_id} {status}"
    except (ts.TritonConnectionError, ts.TritonTimeoutError) as exc:
        return str(exc)
    except ts.TritonError as exc:
        return repr(exc)
    return ""


def local_server(repository: str) -> str:
    from triton_sdk.local import LocalServer

    with LocalServer(repository) as server:
        return server.grpc_url + server.http_url + server.metrics_url
