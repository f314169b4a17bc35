"""Typed answers of the server-level calls."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "CudaSharedMemoryRegion",
    "ModelStatus",
    "ServerMetadata",
    "SharedMemoryRegion",
    "not_ready_because",
]


@attrs.frozen(kw_only=True)
class ServerMetadata:
    """Who the server is: its name, version and the protocol extensions it supports."""

    name: str
    version: str
    extensions: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerMetadata:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            name=str(data["name"]),  # (a server names itself; "" over gRPC is read as "")
            version=str(data.get("version", "")),
            extensions=tuple(str(item) for item in data.get("extensions", ())),
        )


@attrs.frozen(kw_only=True)
class ModelStatus:
    """One entry of the model repository index.

    Attributes:
        name: the model's name.
        version: the version this entry is about; ``None`` when the server names none
            (a model that was never loaded).
        state: the state as the server names it: ``"READY"``, ``"UNAVAILABLE"``,
            ``"LOADING"``, ``"UNLOADING"``, or ``""`` when it has none.
        reason: why the model is in that state; ``""`` when none is given.
    """

    name: str
    version: str | None = None
    state: str = ""
    reason: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelStatus:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            name=str(data["name"]),
            version=str(data["version"]) if data.get("version") else None,
            # MLServer's gRPC index names the state as its Python enum prints ("State.READY").
            state=str(data.get("state") or "").removeprefix("State."),
            reason=str(data.get("reason") or ""),
        )


@attrs.frozen(kw_only=True)
class SharedMemoryRegion:
    """A system shared memory region registered with the server."""

    name: str
    key: str
    offset: int = 0
    byte_size: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SharedMemoryRegion:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            name=str(data.get("name", "")),
            key=str(data.get("key", "")),
            offset=int(data.get("offset") or 0),
            byte_size=int(data.get("byte_size") or 0),
        )


@attrs.frozen(kw_only=True)
class CudaSharedMemoryRegion:
    """A CUDA shared memory region registered with the server."""

    name: str
    device_id: int = 0
    byte_size: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CudaSharedMemoryRegion:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            name=str(data.get("name", "")),
            device_id=int(data.get("device_id") or 0),
            byte_size=int(data.get("byte_size") or 0),
        )


def not_ready_because(index: Iterable[ModelStatus], model: str, *, server_ready: bool) -> str:
    """Why ``model`` is not ready, from the repository ``index``: its state and reason
    (``UNAVAILABLE: unloaded``, ``LOADING``), or that it is not there."""
    states = [status for status in index if status.name == model]
    if not states:
        return "it is not in the model repository"
    described = "; ".join(
        (state.state or "no state") + (f": {state.reason}" if state.reason else "")
        for state in states
    )
    return described if server_ready else f"the server is not ready; the model is {described}"
