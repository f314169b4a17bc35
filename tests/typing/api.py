"""Usage examples of the public API, checked by mypy --strict (never executed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import triton_sdk as ts
import triton_sdk.ops
from triton_sdk.testing import MockTransport, RecordedCall


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


def model_kinds(client: ts.Client, samples: list[dict[str, ts.InputValue]]) -> int:
    classes: list[list[ts.Classification]] = client.model("classifier").classify(
        top_k=3, output="SCORES", FEATURES=np.zeros((2, 4), dtype=np.float32)
    )
    best: str | None = classes[0][0].label
    stream: ts.ResponseStream[ts.InferResult] = client.model("repeat").stream(IN=[4, 2, 0])
    with stream:
        values = [int(result["OUT"][0]) for result in stream]
    with client.model("accumulate").sequence() as sequence:
        sequence.infer(INPUT=[1])
        total: ts.InferResult = sequence.infer(INPUT=[2], end=True)
        sequence_id: int | str = sequence.sequence_id
    results: list[ts.InferResult] = list(client.model("scale").map(samples, concurrency=2))
    outcomes: list[ts.InferResult | ts.TritonError] = list(
        client.model("scale").map(samples, errors="collect", progress=True)
    )
    left_early = client.model("scale").map(samples)
    next(left_early)
    left_early.close()  # (docs/bulk.md: close() ends it early; it was typed Iterator)
    generated: dict[str, ts.JSONValue] = client.model("generator").generate(text_input="hi")
    # numpy scalars, which the docs promise for parameters= and priority=
    client.model("scale").infer(
        samples[0], parameters={"k": np.float32(0.5), "j": np.int64(3)}, priority=np.uint64(3)
    )
    client.model("generator").generate(text_input="hi", parameters={"k": np.bool_(True)})
    chunks = [
        chunk["text_output"] for chunk in client.model("generator").generate_stream(text_input="hi")
    ]
    statistics: list[ts.ModelStatistics] = client.model_statistics("scale")
    metrics: ts.ModelMetrics = client.metrics().model("scale")
    trace: ts.TraceSettings = client.update_trace_settings("scale", rate=10)
    client.update_trace_settings("scale", clear=["rate", "count"])
    # None leaves an optional input out, by keyword, in a mapping and in map's samples
    bias: npt.NDArray[np.float32] | None = None
    client.model("all_dtypes").infer(IN_FP32=[[1.0]], IN_BOOL=bias)
    client.model("all_dtypes").infer({"IN_FP32": [[1.0]], "IN_BOOL": None})
    list(client.model("all_dtypes").map([{"IN_FP32": [1.0], "IN_BOOL": None}]))
    log: ts.LogSettings = client.update_log_settings(verbose_level=1)
    del best, total, sequence_id, generated, chunks, trace, log
    return (
        len(values) + len(results) + len(outcomes) + len(statistics) + int(metrics.request_success)
    )


async def async_model_kinds(client: ts.AsyncClient) -> list[int]:
    model = await client.model("repeat")
    values = [int(result["OUT"][0]) async for result in model.stream(IN=[1, 2])]
    accumulate = await client.model("accumulate")
    async with accumulate.sequence() as sequence:
        await sequence.infer_sample(INPUT=1, end=True)
    scale = await client.model("scale")

    async def samples() -> AsyncIterator[dict[str, ts.InputValue]]:
        yield {"IMAGE": np.zeros((2, 2), dtype=np.uint8), "SCALE": 1.0}

    values += [len(result) async for result in scale.map(samples())]
    left_early = scale.map(samples())
    await anext(left_early)
    await left_early.aclose()
    async for chunk in (await client.model("generator")).generate_stream(text_input="hi"):
        values.append(len(chunk))
    return values


class TokenHook(ts.CallHook):
    """A hook that adds a header to every attempt and counts failures."""

    def __init__(self) -> None:
        self.failures = 0

    def before_send(self, op: ts.ops.Op[Any] | ts.ops.StreamOp[Any], ctx: ts.CallContext) -> None:
        ctx.headers = {**ctx.headers, "authorization": "Bearer fresh"}

    def on_error(
        self, op: ts.ops.Op[Any] | ts.ops.StreamOp[Any], ctx: ts.CallContext, error: ts.TritonError
    ) -> None:
        self.failures += 1


def headers_hooks_and_mocks(spec: ts.ModelSpec) -> int:
    def handler(op: ts.ops.Op[Any] | ts.ops.StreamOp[Any], ctx: ts.CallContext) -> object:
        if isinstance(op, ts.ops.InferRequest):
            return {"OUTPUT": np.zeros((1, 4), dtype=np.float32)}
        return ts.TritonConnectionError("down", retryable=True)

    mock = MockTransport(handler, models=[spec])
    transport: ts.Transport = mock
    atransport: ts.AsyncTransport = mock
    del atransport
    with ts.Client("grpc://test", transport=transport, hooks=[TokenHook()]) as client:
        model = client.model(spec.name, headers={"x-request-id": "1"})
        model.infer(TEXT=["a"], headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
        config: dict[str, Any] = client.model_config(spec.name)
        del config
    recorded: list[RecordedCall] = mock.calls
    return len(recorded)


def openai_calls(client: ts.Client, streaming: bool) -> str:
    messages = [{"role": "user", "content": "hi"}]
    answer: ts.ChatCompletion = client.chat.completions.create(model="m", messages=messages)
    chunks: ts.ResponseStream[ts.ChatCompletionChunk] = client.chat.completions.create(
        model="m", messages=messages, stream=True, stream_options={"include_usage": False}
    )
    # A stream decided at run time (a bool, not a literal): either answer.
    either = client.chat.completions.create(model="m", messages=messages, stream=streaming)
    got: ts.ChatCompletion | ts.ResponseStream[ts.ChatCompletionChunk] = either
    text = client.completions.create(model="m", prompt="Once", stream=streaming)
    texts: ts.Completion | ts.ResponseStream[ts.CompletionChunk] = text
    # A backend's own options as mappings, numpy scalars, None for the server's default.
    biased = client.chat.completions.create(
        model="m", messages=messages, logit_bias={"50256": -100.0}, temperature=np.float32(0.2)
    )
    llm = client.model("m")
    llm.chat(messages, guided_decoding={"json": {"type": "object"}}, seed=None)
    llm.complete("x", max_tokens=np.int64(3))
    del chunks, got, texts, biased
    return answer.text


async def async_openai_calls(client: ts.AsyncClient, streaming: bool) -> str:
    messages = [{"role": "user", "content": "hi"}]
    either = await client.chat.completions.create(model="m", messages=messages, stream=streaming)
    got: ts.ChatCompletion | ts.AsyncResponseStream[ts.ChatCompletionChunk] = either
    del got
    answer = await client.completions.create(model="m", prompt="Once")
    return answer.text


def tls_files() -> ts.TLSConfig:
    ts.TLSConfig(ca_file=42)  # type: ignore[arg-type]  # (a path, which types now say)
    return ts.TLSConfig(ca_file=Path("ca.pem"), cert_file="cert.pem", key_file=None)
