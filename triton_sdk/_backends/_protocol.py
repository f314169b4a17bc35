"""The interface both shells program against, once blocking and once asyncio."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Protocol

from .._generate import JSONValue
from .._request import InferRequest, ParameterValue
from .._result import InferResult
from .._spec import ModelSpec

__all__ = ["JSON", "AsyncBackend", "SyncBackend"]

JSON = dict[str, Any]
"""A decoded JSON object (gRPC answers are converted to the same shape as HTTP's)."""


class SyncBackend(Protocol):
    """A blocking connection to one server. Every method may raise only TritonError."""

    def is_live(self, timeout: float | None) -> bool: ...

    def is_ready(self, timeout: float | None) -> bool: ...

    def is_model_ready(self, name: str, version: str | None, timeout: float | None) -> bool: ...

    def server_metadata(self, timeout: float | None) -> JSON: ...

    def model_metadata(self, name: str, version: str | None, timeout: float | None) -> JSON: ...

    def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON: ...

    def repository_index(self, timeout: float | None) -> list[JSON]: ...

    def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None: ...

    def unload_model(self, name: str, unload_dependents: bool, timeout: float | None) -> None: ...

    def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]: ...

    def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON:
        """The trace settings after applying ``updates`` (None: just read them)."""
        ...

    def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON: ...

    def infer(self, request: InferRequest, timeout: float | None) -> InferResult: ...

    def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> Iterator[InferResult]:
        """Every response of a (decoupled) model; ``timeout`` bounds the wait for each."""
        ...

    def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]: ...

    def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> Iterator[dict[str, JSONValue]]: ...

    def close(self) -> None: ...


class AsyncBackend(Protocol):
    """The asyncio twin of :class:`SyncBackend`: the same methods, as coroutines."""

    async def is_live(self, timeout: float | None) -> bool: ...

    async def is_ready(self, timeout: float | None) -> bool: ...

    async def is_model_ready(
        self, name: str, version: str | None, timeout: float | None
    ) -> bool: ...

    async def server_metadata(self, timeout: float | None) -> JSON: ...

    async def model_metadata(
        self, name: str, version: str | None, timeout: float | None
    ) -> JSON: ...

    async def model_config(self, name: str, version: str | None, timeout: float | None) -> JSON: ...

    async def repository_index(self, timeout: float | None) -> list[JSON]: ...

    async def load_model(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        timeout: float | None,
    ) -> None: ...

    async def unload_model(
        self, name: str, unload_dependents: bool, timeout: float | None
    ) -> None: ...

    async def model_statistics(
        self, name: str | None, version: str | None, timeout: float | None
    ) -> list[JSON]: ...

    async def trace_settings(
        self, model: str | None, updates: Mapping[str, list[str]] | None, timeout: float | None
    ) -> JSON: ...

    async def log_settings(
        self, updates: Mapping[str, bool | int | str] | None, timeout: float | None
    ) -> JSON: ...

    async def infer(self, request: InferRequest, timeout: float | None) -> InferResult: ...

    def stream(
        self, request: InferRequest, spec: ModelSpec, timeout: float | None
    ) -> AsyncIterator[InferResult]: ...

    async def generate(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> dict[str, JSONValue]: ...

    def generate_stream(
        self,
        spec: ModelSpec,
        version: str | None,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: float | None,
    ) -> AsyncIterator[dict[str, JSONValue]]: ...

    async def close(self) -> None: ...
