"""Small KServe models for the Open Inference Protocol tests, served on loopback.

Run inside an environment with kserve: ``python kserve_server.py --http_port P
--grpc_port Q``. The models are those of mlserver_models/oip_models.py. KServe binds every
interface ("0.0.0.0" for REST, "[::]" for gRPC, fixed in its code): the two servers are
made to bind 127.0.0.1 instead.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import grpc.aio
import numpy as np
import uvicorn
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

_Config = uvicorn.Config
_add_port = grpc.aio._server.Server.add_insecure_port


def _loopback_config(*args: Any, **kwargs: Any) -> uvicorn.Config:
    kwargs["host"] = "127.0.0.1"
    return _Config(*args, **kwargs)


def _loopback_port(self: Any, address: str) -> int:
    return _add_port(self, address.replace("[::]", "127.0.0.1"))


uvicorn.Config = _loopback_config  # type: ignore[misc]
grpc.aio._server.Server.add_insecure_port = _loopback_port  # type: ignore[method-assign]


def _output(name: str, array: np.ndarray, datatype: str) -> InferOutput:
    output = InferOutput(name=name, shape=list(array.shape), datatype=datatype)
    output.set_data_from_numpy(array, binary_data=False)
    return output


class Tensors(Model):
    """A model that declares its tensors (KServe's metadata reads them from here)."""

    def __init__(self, name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]):
        super().__init__(name)
        self._inputs, self._outputs = inputs, outputs
        self.ready = True

    def get_input_types(self) -> list[dict[str, Any]]:
        return self._inputs

    def get_output_types(self) -> list[dict[str, Any]]:
        return self._outputs

    def answer(self, payload: InferRequest, outputs: list[InferOutput]) -> InferResponse:
        return InferResponse(
            model_name=self.name, infer_outputs=outputs, response_id=payload.id or "id"
        )


def tensor(name: str, datatype: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape}


class AddSub(Tensors):
    def __init__(self) -> None:
        rows = [-1, 4]
        inputs = [tensor("INPUT0", "FP32", rows), tensor("INPUT1", "FP32", rows)]
        outputs = [tensor("OUTPUT0", "FP32", rows), tensor("OUTPUT1", "FP32", rows)]
        super().__init__("add_sub", inputs, outputs)

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        given = {item.name: item.as_numpy().astype(np.float32) for item in payload.inputs}
        first, second = given["INPUT0"], given["INPUT1"]
        outputs = [
            _output("OUTPUT0", first + second, "FP32"),
            _output("OUTPUT1", first - second, "FP32"),
        ]
        return self.answer(payload, outputs)


class Upper(Tensors):
    def __init__(self) -> None:
        super().__init__("upper", [tensor("TEXT", "BYTES", [-1])], [tensor("UPPER", "BYTES", [-1])])

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        texts = payload.inputs[0].as_numpy().reshape(-1)
        upper = [
            (item.decode() if isinstance(item, bytes) else str(item)).upper().encode()
            for item in texts
        ]
        return self.answer(payload, [_output("UPPER", np.array(upper, dtype=np.object_), "BYTES")])


class Words(Tensors):
    """WORDS: the words of the first TEXT (as many rows as words: not one per sample)."""

    def __init__(self) -> None:
        super().__init__("words", [tensor("TEXT", "BYTES", [-1])], [tensor("WORDS", "BYTES", [-1])])

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        first = payload.inputs[0].as_numpy().reshape(-1)[0]
        text = first.decode() if isinstance(first, bytes) else str(first)
        words = np.array([word.encode() for word in text.split()], dtype=np.object_)
        return self.answer(payload, [_output("WORDS", words, "BYTES")])


class Vector(Tensors):
    def __init__(self) -> None:
        super().__init__("vector", [tensor("X", "FP32", [3])], [tensor("Y", "FP32", [3])])

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        x = payload.inputs[0].as_numpy().astype(np.float32)
        return self.answer(payload, [_output("Y", 2 * x, "FP32")])


def _plain(value: Any) -> Any:
    """A parameter's value: KServe hands gRPC parameters over as InferParameter messages."""
    if hasattr(value, "WhichOneof"):
        return getattr(value, value.WhichOneof("parameter_choice"))
    return value


class Params(Tensors):
    """SEEN: the request's parameters as JSON."""

    def __init__(self) -> None:
        super().__init__("params", [tensor("TEXT", "BYTES", [-1])], [tensor("SEEN", "BYTES", [1])])

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        given = {key: _plain(value) for key, value in (payload.parameters or {}).items()}
        if given.get("fail"):
            raise ValueError("asked to fail")
        seen = json.dumps(given, sort_keys=True)
        return self.answer(
            payload, [_output("SEEN", np.array([seen.encode()], np.object_), "BYTES")]
        )


class Bare(Tensors):
    """Vector's model, declaring no tensors (as a model without input types does)."""

    def __init__(self) -> None:
        super().__init__("bare", [], [])

    async def predict(self, payload: InferRequest, *args: Any, **kwargs: Any) -> InferResponse:
        x = payload.inputs[0].as_numpy().astype(np.float32)
        return self.answer(payload, [_output("Y", 2 * x, "FP32")])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http_port", type=int, required=True)
    parser.add_argument("--grpc_port", type=int, required=True)
    ports = parser.parse_args()
    ModelServer(http_port=ports.http_port, grpc_port=ports.grpc_port).start(
        [AddSub(), Upper(), Words(), Vector(), Params(), Bare()]
    )
