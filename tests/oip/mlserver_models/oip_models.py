"""Small MLServer models for the Open Inference Protocol tests (run inside MLServer).

add_sub: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32, a batch of rows of 4);
upper: TEXT upper-cased (BYTES, a batch of strings); words: the words of the first TEXT
(as many rows as words, not one per sample); vector: Y = 2 * X for one fixed
vector of 3 (no batch axis); repeat (streaming): one response per element of IN (INT32),
OUT = the element and IDX = its index; it fails at a negative element; params: SEEN =
the request's parameters as JSON (those the server adds left out).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


def _inputs(payload: InferenceRequest) -> dict[str, np.ndarray]:
    return {item.name: NumpyCodec.decode_input(item) for item in payload.inputs}


def _output(name: str, array: np.ndarray, datatype: str = "FP32") -> ResponseOutput:
    """An output of exactly the array's shape (MLServer's codecs add a trailing axis)."""
    if array.dtype == np.object_:
        data = [item.decode() if isinstance(item, bytes) else str(item) for item in array.flat]
        return ResponseOutput(name=name, shape=list(array.shape), datatype="BYTES", data=data)
    return ResponseOutput(
        name=name, shape=list(array.shape), datatype=datatype, data=array.flatten().tolist()
    )


class AddSub(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        given = _inputs(payload)
        first, second = given["INPUT0"], given["INPUT1"]
        outputs = [_output("OUTPUT0", first + second), _output("OUTPUT1", first - second)]
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs)


class Upper(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        upper = [text.upper() for text in StringCodec.decode_input(payload.inputs[0])]
        output = _output("UPPER", np.array(upper, dtype=np.object_))
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])


class Words(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        words = StringCodec.decode_input(payload.inputs[0])[0].split()
        output = _output("WORDS", np.array(words, dtype=np.object_))
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])


class Vector(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = _inputs(payload)["X"].astype(np.float32).reshape(-1)
        output = _output("Y", 2 * x)
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])


class Params(MLModel):
    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        given = payload.parameters.model_dump() if payload.parameters else {}
        if given.get("fail"):
            raise ValueError("asked to fail")
        seen = {key: value for key, value in given.items() if key not in ADDED_PARAMETERS}
        output = _output("SEEN", np.array([json.dumps(seen, sort_keys=True)], dtype=np.object_))
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])


ADDED_PARAMETERS = {"headers", "content_type"}
"""Parameters MLServer adds to a request (or keeps, with None)."""


class Repeat(MLModel):
    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        async for payload in payloads:
            for index, value in enumerate(_inputs(payload)["IN"].reshape(-1).tolist()):
                if value < 0:
                    raise ValueError(f"repeat takes no negative numbers, got {value}")
                outputs = [
                    _output("OUT", np.array([value], np.int32), "INT32"),
                    _output("IDX", np.array([index], np.uint32), "UINT32"),
                ]
                yield InferenceResponse(
                    model_name=self.name, model_version=self.version, outputs=outputs
                )
