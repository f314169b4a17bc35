"""triton_sdk: a typed, batteries-included client for NVIDIA Triton Inference Server.

>>> import triton_sdk as ts
>>> model = ts.Client("localhost:8001").model("text_embed")      # doctest: +SKIP
>>> model.infer(TEXT=["hello", "world"])["OUTPUT"].shape          # doctest: +SKIP
(2, 768)
"""

from ._async_client import (
    AsyncChat,
    AsyncChatCompletions,
    AsyncClient,
    AsyncCompletions,
    AsyncModel,
    AsyncModelSequence,
)
from ._balance import EndpointState
from ._call import CallContext, CallHook
from ._chat_template import ChatTemplateError
from ._classify import Classification
from ._client import Chat, ChatCompletions, Client, Completions, Model, ModelSequence
from ._config import NOT_GIVEN, NotGiven, RetryBudget, RetryPolicy, TLSConfig
from ._errors import (
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    SequenceLostError,
    ServerOverloadedError,
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    UnknownOutputError,
    UnsupportedError,
    UnsupportedRequestError,
)
from ._generate import JSONValue
from ._llm_types import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionChunk,
    Usage,
)
from ._operations import (
    BatchStatistics,
    DurationStatistics,
    InferenceStatistics,
    LogSettings,
    ModelMetrics,
    ModelStatistics,
    ServerMetrics,
    TraceSettings,
)
from ._request import ParameterInput, ParameterValue, Priority
from ._result import InferResult
from ._sequence import SequenceNotEndedWarning
from ._shaping import InputValue
from ._spec import ModelSpec, TensorSpec
from ._status import CudaSharedMemoryRegion, ModelStatus, ServerMetadata, SharedMemoryRegion
from ._streams import AsyncResponseStream, ResponseStream
from ._transports._protocol import AsyncTransport, Transport

__version__ = "0.1.0"

__all__ = [
    "NOT_GIVEN",
    "AsyncChat",
    "AsyncChatCompletions",
    "AsyncClient",
    "AsyncCompletions",
    "AsyncModel",
    "AsyncModelSequence",
    "AsyncResponseStream",
    "AsyncTransport",
    "BatchStatistics",
    "CallContext",
    "CallHook",
    "Chat",
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletions",
    "ChatMessage",
    "ChatTemplateError",
    "ChoiceDelta",
    "ChunkChoice",
    "Classification",
    "Client",
    "Completion",
    "CompletionChoice",
    "CompletionChunk",
    "Completions",
    "CudaSharedMemoryRegion",
    "DurationStatistics",
    "EndpointState",
    "InferResult",
    "InferenceError",
    "InferenceStatistics",
    "InputValue",
    "InvalidInputError",
    "JSONValue",
    "LogSettings",
    "Model",
    "ModelMetrics",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "ModelSequence",
    "ModelSpec",
    "ModelStatistics",
    "ModelStatus",
    "NotGiven",
    "ParameterInput",
    "ParameterValue",
    "Priority",
    "ResponseStream",
    "RetryBudget",
    "RetryPolicy",
    "SequenceLostError",
    "SequenceNotEndedWarning",
    "ServerMetadata",
    "ServerMetrics",
    "ServerOverloadedError",
    "SharedMemoryRegion",
    "TLSConfig",
    "TensorSpec",
    "TraceSettings",
    "Transport",
    "TritonConnectionError",
    "TritonError",
    "TritonTimeoutError",
    "UnknownOutputError",
    "UnsupportedError",
    "UnsupportedRequestError",
    "Usage",
    "__version__",
]
