"""Compression against the real server, the bytes counted on the wire by a relay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import LoopThread
from ._relay import Relay
from .conftest import close_client, open_client

SAMPLE = 262144  # FP32 elements of big_fixed: 1 MiB, compressible when constant


@pytest.fixture
def through_relay(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    """make(**options) -> (client, relay): a client whose bytes go through a counting relay."""
    opened: list[tuple[Any, Relay]] = []

    def make(**options: Any) -> tuple[Any, Relay]:
        port = server.grpc_port if protocol == "grpc" else server.http_port
        relay = Relay("127.0.0.1", port)
        url = f"{protocol}://127.0.0.1:{relay.port}"
        client = open_client(url, mode, loop_thread, shared_memory="off", **options)
        opened.append((client, relay))
        return client, relay

    yield make
    for client, relay in opened:
        close_client(client, loop_thread)
        relay.close()


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_compressed_requests_carry_far_fewer_bytes_and_the_same_results(
    through_relay: Any, protocol: str, compression: str
) -> None:
    client, relay = through_relay(compression=compression)
    model = client.model("big_fixed")
    batch = np.full((2, SAMPLE), 3.0, dtype=np.float32)
    before = relay.bytes_from_clients, relay.bytes_to_clients
    assert np.array_equal(model.infer(X=batch)["Y"], 2 * batch)
    sent = relay.bytes_from_clients - before[0]
    received = relay.bytes_to_clients - before[1]
    assert sent < batch.nbytes / 20, f"{sent} bytes sent for {batch.nbytes}"
    if protocol == "http":  # Triton compresses gRPC answers only when started to
        assert received < batch.nbytes / 20, f"{received} bytes received"


def test_without_compression_the_bytes_are_the_tensors(through_relay: Any) -> None:
    client, relay = through_relay()
    batch = np.full((1, SAMPLE), 3.0, dtype=np.float32)
    before = relay.bytes_from_clients
    client.model("big_fixed").infer(X=batch)
    assert relay.bytes_from_clients - before > batch.nbytes


def test_an_unknown_compression_is_refused(make_client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="compression"):
        make_client(compression="brotli")


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_every_call_works_on_a_compressing_client(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread, compression: str
) -> None:
    """Triton reads only inference requests compressed: the other bodies (settings,
    generate, shared memory registration) travel as they are."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    client = open_client(url, mode, loop_thread, compression=compression)
    try:
        assert any(entry.name == "double" for entry in client.models())
        level = client.log_settings().verbose_level
        assert client.update_log_settings(verbose_level=level).verbose_level == level
        assert client.model("generator").generate(text_input="hi", max_tokens=1) == {
            "text_output": "hi ",
            "index": 0,
        }
        model = client.model("double")
        x = np.ones((1, 2, 2), dtype=np.float32)
        result = model.infer(X=x, shared_memory="system")  # registers a region first
        assert np.array_equal(result["Y"], 2 * x)
    finally:
        close_client(client, loop_thread)
