"""Every server call as a value: what hooks and transports (and MockTransport handlers) see.

Each op is a frozen attrs class; ``op.call`` names it (``"infer"``, ``"model_metadata"``),
``op.model`` is the model it is about, ``op.idempotent`` says whether it may be retried.
Unary ops (:class:`Op`) have one answer, streamed ops (:class:`StreamOp`) many.
"""

from ._ops import (
    JSON,
    FetchMetrics,
    Generate,
    GenerateStream,
    GetLogSettings,
    GetModelConfig,
    GetModelMetadata,
    GetModelStatistics,
    GetServerMetadata,
    GetSystemSharedMemoryStatus,
    GetTraceSettings,
    IsModelReady,
    IsServerLive,
    IsServerReady,
    JSONValue,
    ListModels,
    LoadModel,
    Op,
    RegisterSystemSharedMemory,
    Route,
    StreamInfer,
    StreamOp,
    UnloadModel,
    UnregisterSystemSharedMemory,
    UpdateLogSettings,
    UpdateTraceSettings,
)
from ._request import InferRequest, RequestedOutput
from ._shaping import Tensor

__all__ = [
    "JSON",
    "FetchMetrics",
    "Generate",
    "GenerateStream",
    "GetLogSettings",
    "GetModelConfig",
    "GetModelMetadata",
    "GetModelStatistics",
    "GetServerMetadata",
    "GetSystemSharedMemoryStatus",
    "GetTraceSettings",
    "InferRequest",
    "IsModelReady",
    "IsServerLive",
    "IsServerReady",
    "JSONValue",
    "ListModels",
    "LoadModel",
    "Op",
    "RegisterSystemSharedMemory",
    "RequestedOutput",
    "Route",
    "StreamInfer",
    "StreamOp",
    "Tensor",
    "UnloadModel",
    "UnregisterSystemSharedMemory",
    "UpdateLogSettings",
    "UpdateTraceSettings",
]
