"""How ``model.stream`` ends a gRPC stream, seen from a gRPC server of the test's own that
holds each stream open for a while after its last response (as a server may, between that
response and its closing status).

A stream whose request has had its last response must not be cancelled, however the
reader leaves it: a cancellation that races the server's close of the stream can crash
older Triton releases. A stream left before then must be (the server stops the
request).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk._concurrency import within
from triton_sdk._transports import _grpc

HOLD = 0.5
"""Seconds the server keeps each stream open after its last response."""


def response(*, outputs: bool, final: bool, error: str = "") -> pb.ModelStreamInferResponse:
    answer = pb.ModelInferResponse(model_name="talker", model_version="1")
    if outputs:
        answer.outputs.add(name="Y", datatype="FP32", shape=[1])
        answer.raw_output_contents.append(np.float32(1.0).tobytes())
    if final:
        answer.parameters["triton_final_response"].bool_param = True
    return pb.ModelStreamInferResponse(error_message=error, infer_response=answer)


TWO_RESPONSES = [response(outputs=True, final=False), response(outputs=False, final=True)]
ONE_FINAL_RESPONSE = [response(outputs=True, final=True)]
A_FINAL_ERROR = [response(outputs=False, final=True, error="the model refused it")]


class HoldingServer:
    """A decoupled model, ``talker``: answers each stream with ``script``, keeps the stream
    open for ``hold`` seconds, then closes it; ``cancelled`` records, for each stream, whether
    the client cancelled it. With ``refuse``, it ends each stream at once, UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.script = TWO_RESPONSES
        self.hold = HOLD
        self.refuse = False
        self.cancelled: list[bool] = []
        self._server = grpc.server(ThreadPoolExecutor(4))
        unary = grpc.unary_unary_rpc_method_handler
        handlers = {
            "ModelMetadata": unary(
                lambda request, context: self.metadata(),
                request_deserializer=pb.ModelMetadataRequest.FromString,
                response_serializer=pb.ModelMetadataResponse.SerializeToString,
            ),
            "ModelConfig": unary(
                lambda request, context: self.config(),
                request_deserializer=pb.ModelConfigRequest.FromString,
                response_serializer=pb.ModelConfigResponse.SerializeToString,
            ),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
                self._stream,
                request_deserializer=pb.ModelInferRequest.FromString,
                response_serializer=pb.ModelStreamInferResponse.SerializeToString,
            ),
        }
        service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)
        self._server.add_generic_rpc_handlers([service])
        self.url = f"grpc://127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    @staticmethod
    def metadata() -> pb.ModelMetadataResponse:
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name="talker",
            versions=["1"],
            platform="python",
            inputs=[tensor(name="X", datatype="FP32", shape=[1])],
            outputs=[tensor(name="Y", datatype="FP32", shape=[1])],
        )

    @staticmethod
    def config() -> pb.ModelConfigResponse:
        config = mc.ModelConfig(
            name="talker",
            backend="python",
            input=[mc.ModelInput(name="X", data_type=mc.TYPE_FP32, dims=[1])],
            output=[mc.ModelOutput(name="Y", data_type=mc.TYPE_FP32, dims=[1])],
            model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
        )
        return pb.ModelConfigResponse(config=config)

    def _stream(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        if self.refuse:  # at once, before reading the request: a server without streams
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        next(requests)
        returning, ended = threading.Event(), threading.Event()

        def on_end() -> None:  # called when the call ends: cancelled, or after the return
            self.cancelled.append(not returning.is_set())
            ended.set()

        context.add_callback(on_end)
        yield from self.script
        ended.wait(self.hold)
        returning.set()

    def stream_was_cancelled(self) -> bool:
        """Whether the client cancelled the one stream of the test."""
        for _ in range(100):
            if self.cancelled:
                break
            threading.Event().wait(self.hold / 10)
        assert len(self.cancelled) == 1
        return self.cancelled[0]

    def stop(self) -> None:
        self._server.stop(None)


@pytest.fixture
def server() -> Iterator[HoldingServer]:
    running = HoldingServer()
    yield running
    running.stop()


# Blocking


def test_a_stream_read_to_its_end_is_not_cancelled(server: HoldingServer) -> None:
    with ts.Client(server.url) as client:
        with client.model("talker").stream(X=[1.0]) as responses:
            assert [response["Y"].tolist() for response in responses] == [[1.0]]
        assert server.stream_was_cancelled() is False


def test_a_stream_dropped_after_its_last_response_is_not_cancelled(
    server: HoldingServer,
) -> None:
    # The last response carries the outputs: the reader takes it and leaves.
    server.script = ONE_FINAL_RESPONSE
    with ts.Client(server.url) as client:
        responses = client.model("talker").stream(X=[1.0])
        assert next(responses)["Y"].tolist() == [1.0]
        responses.close()
        assert server.stream_was_cancelled() is False


def test_a_stream_ended_by_an_error_response_is_not_cancelled(server: HoldingServer) -> None:
    server.script = A_FINAL_ERROR
    with ts.Client(server.url) as client:
        with pytest.raises(ts.InferenceError, match="the model refused it"):
            list(client.model("talker").stream(X=[1.0]))
        assert server.stream_was_cancelled() is False


def test_a_stream_left_early_is_cancelled(server: HoldingServer) -> None:
    with ts.Client(server.url) as client:
        responses = client.model("talker").stream(X=[1.0])
        next(responses)
        responses.close()  # (the last response may be on its way, or still to be sent)
        assert server.stream_was_cancelled() is True


def test_a_stream_closed_from_another_thread_after_its_end_is_not_cancelled(
    server: HoldingServer,
) -> None:
    with ts.Client(server.url) as client:
        responses = client.model("talker").stream(X=[1.0])
        assert len(list(responses)) == 1
        closer = threading.Thread(target=responses.close)
        closer.start()
        closer.join()
        assert server.stream_was_cancelled() is False


def test_a_stream_the_server_leaves_open_after_its_end_is_cancelled_in_the_end(
    server: HoldingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_grpc, "STREAM_CLOSE_GRACE", 0.1)
    server.hold = 10.0
    with ts.Client(server.url) as client:
        assert len(list(client.model("talker").stream(X=[1.0]))) == 1
        assert server.stream_was_cancelled() is True


def test_a_stream_the_server_ends_before_its_final_response_is_cut_off(
    server: HoldingServer,
) -> None:
    # The responses that came were read as the whole answer (HTTP said it was cut).
    server.script = [response(outputs=True, final=False)]
    server.hold = 0.0
    with ts.Client(server.url) as client:
        responses = client.model("talker").stream(X=[1.0])
        assert next(responses)["Y"].tolist() == [1.0]
        with pytest.raises(ts.InferenceError, match="before the request's final response") as cut:
            next(responses)
        assert cut.value.may_have_run


async def test_an_asyncio_stream_the_server_ends_before_its_final_response_is_cut_off(
    server: HoldingServer,
) -> None:
    server.script = [response(outputs=True, final=False)]
    server.hold = 0.0
    async with asyncio_talker(server) as model:
        responses = model.stream(X=[1.0])
        assert (await anext(responses))["Y"].tolist() == [1.0]
        with pytest.raises(ts.InferenceError, match="before the request's final response"):
            await anext(responses)


# asyncio


@contextlib.asynccontextmanager
async def asyncio_talker(server: HoldingServer) -> AsyncIterator[ts.AsyncModel]:
    async with ts.AsyncClient(server.url) as client:
        yield await client.model("talker")


async def cancelled(server: HoldingServer) -> bool:
    return await asyncio.to_thread(server.stream_was_cancelled)


async def test_an_asyncio_stream_read_to_its_end_is_not_cancelled(server: HoldingServer) -> None:
    async with asyncio_talker(server) as model:
        async with model.stream(X=[1.0]) as responses:
            assert [response["Y"].tolist() async for response in responses] == [[1.0]]
        assert await cancelled(server) is False


async def test_an_asyncio_stream_closed_after_its_last_response_is_not_cancelled(
    server: HoldingServer,
) -> None:
    server.script = ONE_FINAL_RESPONSE
    async with asyncio_talker(server) as model:
        responses = model.stream(X=[1.0])
        assert (await anext(responses))["Y"].tolist() == [1.0]
        await responses.aclose()
        assert await cancelled(server) is False


async def test_an_asyncio_stream_ended_by_an_error_response_is_not_cancelled(
    server: HoldingServer,
) -> None:
    server.script = A_FINAL_ERROR
    async with asyncio_talker(server) as model:
        with pytest.raises(ts.InferenceError, match="the model refused it"):
            [response async for response in model.stream(X=[1.0])]
        assert await cancelled(server) is False


async def test_an_asyncio_stream_left_early_is_cancelled(server: HoldingServer) -> None:
    async with asyncio_talker(server) as model:
        responses = model.stream(X=[1.0])
        await anext(responses)
        await responses.aclose()
        assert await cancelled(server) is True


async def test_an_asyncio_stream_the_server_leaves_open_is_cancelled_in_the_end(
    server: HoldingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_grpc, "STREAM_CLOSE_GRACE", 0.1)
    server.hold = 10.0
    async with asyncio_talker(server) as model:
        assert len([response async for response in model.stream(X=[1.0])]) == 1
        assert await cancelled(server) is True


async def test_an_asyncio_stream_the_server_refuses_at_once_reports_its_status(
    server: HoldingServer,
) -> None:
    # The request raced the server's refusal and sometimes lost it to "Internal error
    # from Core"; many tries make a lost one likely.
    server.refuse = True
    async with asyncio_talker(server) as model:
        for _ in range(300):
            with pytest.raises(ts.UnsupportedError, match="does not support stream"):
                [response async for response in model.stream(X=[1.0])]


async def test_a_task_cancelled_while_it_reads_a_stream_is_cancelled(
    server: HoldingServer,
) -> None:
    # Responses arrive back to back: a cancellation often lands as a read finishes, which
    # asyncio.wait_for (Python < 3.12) dropped, and the task read the stream to its end.
    server.script = [response(outputs=True, final=False)] * 20_000 + ONE_FINAL_RESPONSE
    server.hold = 0.0
    random = np.random.default_rng(3)
    async with asyncio_talker(server) as model:

        async def read() -> int:
            return len([response async for response in model.stream(X=[1.0])])

        for _ in range(30):
            task = asyncio.create_task(read())
            await asyncio.sleep(random.uniform(0.01, 0.04))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_within_keeps_a_cancellation_that_arrives_as_the_wait_ends() -> None:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    task = asyncio.create_task(within(answer, 60.0))
    await asyncio.sleep(0)  # the task waits on the answer now
    answer.set_result(1)
    task.cancel()  # in the same step
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(asyncio.TimeoutError):
        await within(loop.create_future(), 0.01)
    assert await within(asyncio.sleep(0, result=2), None) == 2


def test_a_response_without_outputs_is_a_result_unless_it_is_the_final_flag() -> None:
    # gRPC dropped it (HTTP yields it): a stream of (Y), (nothing), (Y) gave two results,
    # and with outputs= naming what some responses lack, results went missing.
    from triton_sdk._grpc_codec import GrpcStream, encode_stream
    from triton_sdk._ops import StreamInfer
    from triton_sdk._request import InferRequest

    stream = encode_stream(StreamInfer(InferRequest(model="talker", inputs=[]), None))
    assert isinstance(stream, GrpcStream)
    empty = stream.read(response(outputs=False, final=False))
    assert empty is not None
    assert dict(empty) == {}
    assert stream.read(response(outputs=False, final=True)) is None
    assert stream.read(response(outputs=True, final=True)) is not None
