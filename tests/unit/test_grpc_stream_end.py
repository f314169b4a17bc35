"""How the gRPC transports end a stream, seen from a gRPC server of the test's own that
holds each stream open for a while after its final response (as a server may, between that
response and its closing status).

A stream read to its final response must not be cancelled: a cancellation that races the
server's close of the stream can crash Triton releases before 2.56. A stream left early
must be (the server stops the request).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk._call import CallContext
from triton_sdk._config import parse_url
from triton_sdk._ops import StreamInfer
from triton_sdk._request import InferRequest
from triton_sdk._shaping import Tensor
from triton_sdk._transports._grpc import AsyncGrpcTransport, GrpcTransport

HOLD = 0.5
"""Seconds the server keeps each stream open after its last response."""

SPEC = ts.ModelSpec(
    name="talker",
    inputs={"X": ts.TensorSpec(name="X", datatype="FP32", shape=(1,))},
    outputs={"Y": ts.TensorSpec(name="Y", datatype="FP32", shape=(1,))},
    decoupled=True,
)


def response(final: bool) -> pb.ModelStreamInferResponse:
    answer = pb.ModelInferResponse(model_name="talker", model_version="1")
    if final:
        answer.parameters["triton_final_response"].bool_param = True
    else:
        answer.outputs.add(name="Y", datatype="FP32", shape=[1])
        answer.raw_output_contents.append(np.float32(1.0).tobytes())
    return pb.ModelStreamInferResponse(infer_response=answer)


class HoldingServer:
    """Answers each stream with two responses (the second one final), then keeps it open
    for HOLD seconds and records whether the client cancelled it meanwhile."""

    def __init__(self) -> None:
        self.cancelled: list[bool] = []
        self._server = grpc.server(ThreadPoolExecutor(4))
        handler = grpc.stream_stream_rpc_method_handler(
            self._stream,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelStreamInferResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "inference.GRPCInferenceService", {"ModelStreamInfer": handler}
                )
            ]
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _stream(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        next(requests)
        returning, ended = threading.Event(), threading.Event()

        def on_end() -> None:  # called when the call ends: cancelled, or after the return
            self.cancelled.append(not returning.is_set())
            ended.set()

        context.add_callback(on_end)
        yield response(final=False)
        yield response(final=True)
        ended.wait(HOLD)
        returning.set()

    def stop(self) -> None:
        self._server.stop(None)


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    running = HoldingServer()
    yield running
    running.stop()


def op() -> StreamInfer:
    request = InferRequest(model="talker", inputs=[Tensor("X", "FP32", np.ones(1, np.float32))])
    return StreamInfer(request=request, spec=SPEC)


def context() -> CallContext:
    return CallContext(call="stream", model="talker", headers={}, timeout=5.0)


def held_stream_ended(server: HoldingServer) -> bool:
    """Whether the client cancelled the one stream while the server held it open."""
    for _ in range(100):
        if server.cancelled:
            break
        threading.Event().wait(HOLD / 10)
    assert len(server.cancelled) == 1
    return server.cancelled[0]


def test_a_blocking_stream_read_to_its_end_is_not_cancelled(server: HoldingServer) -> None:
    transport = GrpcTransport(parse_url(f"grpc://127.0.0.1:{server.port}"), tls=None)
    try:
        items = list(transport.stream(op(), context()))
        assert [item["Y"].tolist() for item in items] == [[1.0]]
        assert held_stream_ended(server) is False
    finally:
        transport.close()


def test_a_blocking_stream_left_early_is_cancelled(server: HoldingServer) -> None:
    transport = GrpcTransport(parse_url(f"grpc://127.0.0.1:{server.port}"), tls=None)
    try:
        stream = transport.stream(op(), context())
        next(stream)
        stream.close()  # (server-side, the final response may still be on its way)
        assert held_stream_ended(server) is True
    finally:
        transport.close()


async def test_an_asyncio_stream_read_to_its_end_is_not_cancelled(server: HoldingServer) -> None:
    transport = AsyncGrpcTransport(parse_url(f"grpc://127.0.0.1:{server.port}"), tls=None)
    try:
        items = [item async for item in transport.astream(op(), context())]
        assert [item["Y"].tolist() for item in items] == [[1.0]]
        ended = await asyncio.to_thread(held_stream_ended, server)
        assert ended is False
    finally:
        await transport.aclose()


async def test_an_asyncio_stream_left_early_is_cancelled(server: HoldingServer) -> None:
    transport = AsyncGrpcTransport(parse_url(f"grpc://127.0.0.1:{server.port}"), tls=None)
    try:
        stream = transport.astream(op(), context())
        await stream.__anext__()
        await stream.aclose()
        ended = await asyncio.to_thread(held_stream_ended, server)
        assert ended is True
    finally:
        await transport.aclose()
