"""Operator calls against the real server: statistics, metrics, trace and log settings,
loading and unloading models, and readiness per version.

Statistics and settings are read on the session server (each test restores what it
changes). Loading and unloading run on a server of their own, so that the session
server's models stay loaded for the other tests.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from ._blocking import Blocking, LoopThread
from .conftest import (
    EXAMPLE_MODELS,
    build_repository,
    client_for,
    close_client,
    inference_count,
)

T = TypeVar("T")

SETTLE_TIMEOUT = 20.0
_POLL = 0.05


def wait_for(
    read: Callable[[], T], done: Callable[[T], bool], timeout: float = SETTLE_TIMEOUT
) -> T:
    """Read until ``done`` holds or the timeout passes; the last value read."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(_POLL)


def settled(read: Callable[[], T], timeout: float = SETTLE_TIMEOUT) -> T:
    """A value that stayed the same over a few reads (the server bumps counters just after
    answering, so counters read right after a request may still move)."""
    deadline = time.monotonic() + timeout
    last = read()
    same = 0
    while same < 4 and time.monotonic() < deadline:
        time.sleep(_POLL)
        value = read()
        same = same + 1 if value == last else 0
        last = value
    return last


def counters(stats: ts.ModelStatistics) -> tuple[int, int, int, int]:
    inference = stats.inference
    return (
        inference.success.count,
        inference.fail.count,
        stats.inference_count,
        stats.execution_count,
    )


def one_statistics(client: Any, name: str, version: str | None = None) -> ts.ModelStatistics:
    (stats,) = client.model_statistics(name, version)
    assert isinstance(stats, ts.ModelStatistics)
    return stats


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scale_images(count: int) -> np.ndarray[Any, Any]:
    return np.arange(count * 4, dtype=np.uint8).reshape(count, 2, 2)


# Model statistics


def test_statistics_of_every_model(client: Any) -> None:
    stats = client.model_statistics()
    assert stats
    assert all(isinstance(entry, ts.ModelStatistics) for entry in stats)
    names = {entry.name for entry in stats}
    assert {"scale", "text_embed", "add_sub", "accumulate", "repeat"} <= names
    ready = {status.name for status in client.models() if status.state == "READY"}
    assert names <= ready
    assert all(entry.version == "1" for entry in stats)


def test_statistics_of_one_model_rise_by_exactly_the_requests_sent(client: Any) -> None:
    model = client.model("scale")
    before = settled(lambda: one_statistics(client, "scale"))
    assert before.name == "scale"
    assert before.version == "1"
    for batch in (2, 1, 3):
        model.infer(IMAGE=scale_images(batch), SCALE=[1.0] * batch)
    wait_for(
        lambda: one_statistics(client, "scale"),
        lambda stats: stats.inference.success.count >= before.inference.success.count + 3,
    )
    after = settled(lambda: one_statistics(client, "scale"))
    assert after.inference.success.count == before.inference.success.count + 3
    assert after.inference.fail.count == before.inference.fail.count
    assert after.inference_count == before.inference_count + 6  # samples: 2 + 1 + 3
    executions = after.execution_count - before.execution_count
    assert 1 <= executions <= 3
    assert after.inference.success.total_ns > before.inference.success.total_ns
    assert after.inference.compute_infer.count - before.inference.compute_infer.count == (
        executions
    )
    assert after.last_inference >= before.last_inference
    assert after.last_inference > 0
    assert after.inference.success.mean_ms > 0
    assert all(1 <= batch.batch_size <= 4 for batch in after.batches)
    assert sum(batch.compute_infer.count for batch in after.batches) == after.execution_count


def test_statistics_count_failed_requests(client: Any) -> None:
    model = client.model("zeros")
    before = settled(lambda: counters(one_statistics(client, "zeros")))
    with pytest.raises(ts.InferenceError, match="negative"):
        model.infer_sample(COUNT=[-1])
    wait_for(
        lambda: counters(one_statistics(client, "zeros")),
        lambda now: now[1] >= before[1] + 1,
    )
    after = settled(lambda: counters(one_statistics(client, "zeros")))
    assert after[0] == before[0]  # no success
    assert after[1] == before[1] + 1  # one failure


def test_statistics_version_filter(client: Any) -> None:
    stats = client.model_statistics("scale", "1")
    assert [(entry.name, entry.version) for entry in stats] == [("scale", "1")]
    unfiltered = client.model_statistics("scale")
    assert [(entry.name, entry.version) for entry in unfiltered] == [("scale", "1")]


UNKNOWN_MODEL_CALLS: dict[str, Callable[[Any], object]] = {
    "statistics-unknown-model": lambda client: client.model_statistics("nope"),
    "statistics-unknown-version": lambda client: client.model_statistics("scale", "9"),
    "trace-settings-unknown-model": lambda client: client.trace_settings("nope"),
}


@pytest.mark.parametrize("call", UNKNOWN_MODEL_CALLS.values(), ids=UNKNOWN_MODEL_CALLS.keys())
def test_operator_calls_about_an_unknown_model_raise_model_not_found(
    client: Any, call: Callable[[Any], object]
) -> None:
    # ModelNotFoundError: "the server has no model (or no version) of that name"
    # (_errors.py, docs/errors.md). The server answers these with INVALID_ARGUMENT / 400.
    with pytest.raises(ts.ModelNotFoundError):
        call(client)


# Metrics


@pytest.fixture
def metrics_client(
    server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    """A client from LocalServer's helpers: its metrics URL is filled in."""
    if mode == "sync":
        client: Any = server.client("grpc" if protocol == "grpc" else "http")
    else:
        client = Blocking(
            server.async_client("grpc" if protocol == "grpc" else "http"), loop_thread
        )
    yield client
    close_client(client, loop_thread)


def test_metrics_request_success_grows_by_the_requests_sent(metrics_client: Any) -> None:
    client = metrics_client
    model = client.model("scale")
    before = settled(lambda: client.metrics().model("scale"))
    assert isinstance(before, ts.ModelMetrics)
    assert (before.model, before.version) == ("scale", "1")
    model.infer(IMAGE=scale_images(2), SCALE=[1.0, 2.0])
    model.infer(IMAGE=scale_images(1), SCALE=[3.0])
    wait_for(
        lambda: client.metrics().model("scale"),
        lambda now: now.request_success >= before.request_success + 2,
    )
    after = settled(lambda: client.metrics().model("scale"))
    assert after.request_success == before.request_success + 2
    assert after.inference_count == before.inference_count + 3
    assert after.request_failure == before.request_failure
    assert 1 <= after.execution_count - before.execution_count <= 2
    assert after.request_duration_us > before.request_duration_us
    assert after.pending_requests == 0
    assert client.metrics().model("scale", "1").version == "1"


def test_metrics_request_failure_sums_the_reasons(metrics_client: Any) -> None:
    client = metrics_client
    before = settled(lambda: client.metrics().model("zeros"))
    with pytest.raises(ts.InferenceError):
        client.model("zeros").infer_sample(COUNT=[-1])
    wait_for(
        lambda: client.metrics().model("zeros"),
        lambda now: now.request_failure >= before.request_failure + 1,
    )
    after = settled(lambda: client.metrics().model("zeros"))
    assert after.request_failure == before.request_failure + 1
    assert after.request_success == before.request_success


def test_metrics_list_every_model_and_the_server_gauges(metrics_client: Any) -> None:
    metrics = metrics_client.metrics()
    assert isinstance(metrics, ts.ServerMetrics)
    assert {"scale", "text_embed", "add_sub"} <= {entry.model for entry in metrics.models}
    assert "nv_cpu_utilization" in metrics.server
    assert 0.0 <= metrics.server["nv_cpu_utilization"] <= 1.0
    assert "nv_pinned_memory_pool_total_bytes" in metrics.server
    assert metrics.server["nv_pinned_memory_pool_total_bytes"] >= 0
    with pytest.raises(ts.InvalidInputError, match="nope"):
        metrics.model("nope")


def test_metrics_url_given_to_the_constructor_or_the_call(
    server: LocalServer, make_client: Any
) -> None:
    by_constructor = make_client(metrics_url=server.metrics_url)
    assert "scale" in {entry.model for entry in by_constructor.metrics().models}
    by_call = make_client()
    assert "scale" in {entry.model for entry in by_call.metrics(url=server.metrics_url).models}
    assert "scale" in {entry.model for entry in by_call.metrics(server.metrics_url).models}


def test_metrics_from_a_wrong_url(server: LocalServer, make_client: Any) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/metrics"
    client = make_client(metrics_url=nowhere, retry=ts.RetryPolicy.none())
    with pytest.raises(ts.TritonConnectionError):
        client.metrics()
    # After the retries of the default policy too.
    retrying = make_client(metrics_url=nowhere, retry=ts.RetryPolicy(initial_backoff=0.01))
    with pytest.raises(ts.TritonConnectionError):
        retrying.metrics()
    # The right client, a wrong URL for this call.
    with pytest.raises(ts.TritonConnectionError):
        make_client(metrics_url=server.metrics_url).metrics(url=nowhere)
    # A server that answers, but has no metrics there.
    wrong = f"{server.http_url}/metrics"
    with pytest.raises(ts.UnsupportedError, match=f"no metrics at {wrong} \\(404\\)") as caught:
        client.metrics(url=wrong)
    assert caught.value.status == 404
    # Without a path it reads /metrics, and names the URL it read.
    with pytest.raises(ts.UnsupportedError, match=f"no metrics at {wrong} \\(404\\)"):
        client.metrics(url=server.http_url)


def test_a_metrics_url_without_a_path_reads_slash_metrics(
    server: LocalServer, make_client: Any
) -> None:
    base = server.metrics_url.removesuffix("/metrics")
    for url in (base, f"{base}/"):
        metrics = make_client(metrics_url=url).metrics()
        assert "scale" in {entry.model for entry in metrics.models}


def test_a_metrics_path_that_answers_an_empty_page_is_no_metrics(
    server: LocalServer, make_client: Any
) -> None:
    """Triton's metrics port answers any other path with an empty 200."""
    wrong = server.metrics_url.removesuffix("/metrics") + "/metrcs"
    with pytest.raises(ts.UnsupportedError, match=f"no metrics at {wrong} \\(an empty page\\)"):
        make_client(metrics_url=wrong).metrics()


# Trace settings (the session server runs without a trace file)


def test_trace_settings_of_the_server_and_of_a_model(client: Any) -> None:
    settings = client.trace_settings()
    assert isinstance(settings, ts.TraceSettings)
    assert settings.level == ("OFF",)
    assert settings.mode == "triton"
    assert settings.file == ""
    assert settings.rate >= 1
    model = client.trace_settings("scale")
    assert isinstance(model, ts.TraceSettings)
    assert model.level == ("OFF",)
    assert model.rate >= 1


def test_update_trace_settings_server_wide(client: Any) -> None:
    original = client.trace_settings()
    try:
        updated = client.update_trace_settings(rate=original.rate + 7, count=5)
        assert updated.rate == original.rate + 7
        assert updated.count == 5
        assert updated.level == original.level
        assert updated.log_frequency == original.log_frequency
        assert client.trace_settings() == updated
        again = client.update_trace_settings(log_frequency=original.log_frequency + 2)
        assert again.log_frequency == original.log_frequency + 2
        assert again.rate == original.rate + 7  # untouched by an update that leaves it out
    finally:
        client.update_trace_settings(
            rate=original.rate, count=original.count, log_frequency=original.log_frequency
        )
    assert client.trace_settings() == original


def test_update_trace_settings_of_one_model(client: Any) -> None:
    server_wide = client.trace_settings()
    original = client.trace_settings("scale")
    try:
        updated = client.update_trace_settings("scale", rate=original.rate + 3, count=9)
        assert updated.rate == original.rate + 3
        assert updated.count == 9
        assert client.trace_settings("scale") == updated
        # The server-wide settings are not the model's.
        assert client.trace_settings() == server_wide
    finally:
        client.update_trace_settings("scale", clear=["rate", "count"])
    assert client.trace_settings("scale") == original


def test_a_cleared_model_setting_follows_the_server_wide_one(client: Any) -> None:
    # A model's setting could only be set, never undone: it stayed pinned to its value.
    server_wide = client.trace_settings()
    try:
        client.update_trace_settings("scale", rate=server_wide.rate + 3, count=9)
        cleared = client.update_trace_settings("scale", clear=["rate", "count"])
        assert (cleared.rate, cleared.count) == (server_wide.rate, server_wide.count)
        client.update_trace_settings(rate=server_wide.rate + 5)
        assert client.trace_settings("scale").rate == server_wide.rate + 5  # follows it
        # Server-wide, a cleared setting returns to the value the server started with.
        assert client.update_trace_settings(clear="rate").rate == server_wide.rate
    finally:
        client.update_trace_settings("scale", clear=["rate", "count"])
        client.update_trace_settings(clear=["rate", "count"])
    assert client.trace_settings() == server_wide


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"clear": ["speed"]}, "cannot clear trace setting 'speed'"),
        ({"clear": "rate", "rate": 5}, "'rate' given a value and cleared at once"),
    ],
)
def test_a_clear_that_cannot_be_done_is_refused_before_sending(
    client: Any, options: dict[str, Any], message: str
) -> None:
    original = client.trace_settings()
    with pytest.raises(ts.InvalidInputError, match=message):
        client.update_trace_settings(**options)
    assert client.trace_settings() == original


def test_turning_tracing_on_without_a_trace_file_is_refused(client: Any) -> None:
    original = client.trace_settings()
    with pytest.raises(ts.InferenceError, match="trace file") as caught:
        client.update_trace_settings(level=["TIMESTAMPS"])
    assert caught.value.status in ("INVALID_ARGUMENT", 400)
    with pytest.raises(ts.InferenceError, match="trace file"):
        client.update_trace_settings("scale", level="TIMESTAMPS")
    assert client.trace_settings() == original


def test_empty_trace_update_is_refused_before_sending(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="at least one"):
        client.update_trace_settings()
    with pytest.raises(ts.InvalidInputError, match="at least one"):
        client.update_trace_settings("scale")


# Log settings


def test_log_settings_read_and_update(client: Any) -> None:
    original = client.log_settings()
    assert isinstance(original, ts.LogSettings)
    assert original.error is True
    assert original.verbose_level == 0  # LocalServer's default --log-verbose
    assert original.format
    try:
        updated = client.update_log_settings(verbose_level=1, info=not original.info)
        assert updated.verbose_level == 1
        assert updated.info is (not original.info)
        assert (updated.warning, updated.error, updated.file, updated.format) == (
            original.warning,
            original.error,
            original.file,
            original.format,
        )
        assert client.log_settings() == updated
    finally:
        client.update_log_settings(verbose_level=original.verbose_level, info=original.info)
    assert client.log_settings() == original


def test_log_settings_refused_by_the_server(client: Any) -> None:
    original = client.log_settings()
    with pytest.raises(ts.InferenceError, match="log_format"):
        client.update_log_settings(format="no-such-format")
    assert client.log_settings() == original
    with pytest.raises(ts.InvalidInputError, match="at least one"):
        client.update_log_settings()


# Readiness per version


def test_model_readiness_per_version(client: Any) -> None:
    assert client.is_model_ready("scale") is True
    assert client.is_model_ready("scale", "1") is True
    assert client.is_model_ready("scale", "9") is False
    assert client.is_model_ready("no_such_model") is False
    assert client.is_model_ready("no_such_model", "1") is False


# Loading and unloading, on a server of their own (with a trace file)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trace") / "trace.json"


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory, trace_file: Path) -> Iterator[LocalServer]:
    repository = build_repository(tmp_path_factory.mktemp("own_repository"))
    with LocalServer(
        repository, extra_args=["--trace-config", f"triton,file={trace_file}"]
    ) as running:
        yield running


@pytest.fixture
def own_client(
    own_server: LocalServer, protocol: str, mode: str, loop_thread: LoopThread
) -> Iterator[Any]:
    with client_for(own_server, protocol, mode, loop_thread) as client:
        yield client


# The complete config of `scale` (tests/models/scale/config.pbtxt) in its JSON form, with
# another max_batch_size.
def scale_config(max_batch_size: int) -> dict[str, Any]:
    return {
        "name": "scale",
        "backend": "python",
        "max_batch_size": max_batch_size,
        "input": [
            {"name": "IMAGE", "data_type": "TYPE_UINT8", "dims": [2, 2]},
            {"name": "SCALE", "data_type": "TYPE_FP32", "dims": [1]},
            {"name": "BIAS", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
        ],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2, 2]}],
        "dynamic_batching": {"max_queue_delay_microseconds": 100},
    }


def status_of(client: Any, name: str) -> ts.ModelStatus:
    (status,) = [entry for entry in client.models() if entry.name == name]
    assert isinstance(status, ts.ModelStatus)
    return status


def unload_and_wait(client: Any, name: str) -> ts.ModelStatus:
    client.unload_model(name)
    return wait_for(lambda: status_of(client, name), lambda status: status.state != "UNLOADING")


def reload_from_repository(client: Any, name: str) -> None:
    # A load without an override does not undo an earlier override: Triton only reloads
    # when the model's files changed. Unloading first makes it read config.pbtxt again.
    unload_and_wait(client, name)
    client.load_model(name)


def test_load_model_with_a_config_override(own_client: Any, own_server: LocalServer) -> None:
    client = own_client
    assert client.model("scale").spec.max_batch_size == 4
    try:
        client.load_model("scale", scale_config(2))
        assert client.is_model_ready("scale")
        model = client.model("scale")
        assert model.spec.max_batch_size == 2
        before = settled(lambda: inference_count(own_server, "scale"))
        images = scale_images(3)
        out = model.infer(IMAGE=images, SCALE=[1.0, 2.0, 3.0])["OUT"]
        assert out.shape == (3, 2, 2)
        assert np.array_equal(out, images * np.array([1.0, 2.0, 3.0])[:, None, None])
        # The batch of 3 went out as two requests (2 + 1) for the new limit.
        wait_for(lambda: inference_count(own_server, "scale"), lambda now: now >= before + 2)
        assert settled(lambda: inference_count(own_server, "scale")) == before + 2
        assert all(batch.batch_size <= 2 for batch in one_statistics(client, "scale").batches)
        # The override may also be given as its JSON text.
        client.load_model("scale", json.dumps(scale_config(3)))
        assert client.model("scale").spec.max_batch_size == 3
    finally:
        reload_from_repository(client, "scale")
    assert client.is_model_ready("scale")
    assert client.model("scale").spec.max_batch_size == 4


def test_unload_then_load_again(own_client: Any) -> None:
    client = own_client
    model = client.model("add_sub")
    inputs = {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}
    assert model.infer_sample(inputs)["OUTPUT0"].tolist() == [2, 3, 4, 5]
    assert status_of(client, "add_sub").state == "READY"
    try:
        client.unload_model("add_sub")
        assert client.is_model_ready("add_sub") is False
        status = wait_for(
            lambda: status_of(client, "add_sub"), lambda now: now.state == "UNAVAILABLE"
        )
        assert status.state == "UNAVAILABLE"
        assert status.reason == "unloaded"
        with pytest.raises(ts.ModelNotReadyError):
            client.model("add_sub")
        with pytest.raises(ts.ModelNotReadyError):
            model.infer_sample(inputs)
        # Waiting for it names it, and says why it is not ready.
        with pytest.raises(
            ts.TritonTimeoutError,
            match=r"model 'add_sub' at .* not ready after 0.3s \(last: UNAVAILABLE: unloaded\)",
        ) as waited:
            client.wait_until_ready(timeout=0.3, model="add_sub")
        assert waited.value.model == "add_sub"
        # The other models stay loaded.
        assert client.is_model_ready("scale")
        assert status_of(client, "scale").state == "READY"
    finally:
        client.load_model("add_sub")
    assert client.is_model_ready("add_sub") is True
    assert status_of(client, "add_sub").state == "READY"
    assert model.infer_sample(inputs)["OUTPUT0"].tolist() == [2, 3, 4, 5]
    assert client.model("add_sub").infer_sample(inputs)["OUTPUT1"].tolist() == [0, 1, 2, 3]


def test_a_model_named_with_path_punctuation_is_reached_loaded_and_unloaded(
    own_client: Any, own_server: LocalServer
) -> None:
    # Over HTTP the name was %-escaped ("a%2Bb"), which Triton does not decode: the model
    # was unreachable, and unload_model unloaded nothing without a word.
    client, name = own_client, "add+sub=1@a,b:c!"
    source = EXAMPLE_MODELS / "add_sub"
    folder = own_server.repository / name
    folder.mkdir()
    config = (source / "config.pbtxt").read_text().replace('name: "add_sub"\n', "")
    (folder / "config.pbtxt").write_text(config)
    (folder / "1").symlink_to(source / "1", target_is_directory=True)
    try:
        client.load_model(name)
        assert client.is_model_ready(name) is True
        inputs = {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}
        assert client.model(name).infer_sample(inputs)["OUTPUT0"].tolist() == [2, 3, 4, 5]
        client.unload_model(name)
        status = wait_for(lambda: status_of(client, name), lambda now: now.state == "UNAVAILABLE")
        assert status.state == "UNAVAILABLE"
        assert client.is_model_ready(name) is False
    finally:
        client.unload_model(name)
        shutil.rmtree(folder)


def test_load_of_a_model_not_in_the_repository(own_client: Any) -> None:
    with pytest.raises(ts.InferenceError, match="nope"):
        own_client.load_model("nope")
    assert "nope" not in {status.name for status in own_client.models()}


def test_tracing_on_a_server_started_with_a_trace_file(own_client: Any, trace_file: Path) -> None:
    client = own_client
    original = client.trace_settings()
    assert original.file == str(trace_file)
    assert original.level == ("OFF",)
    try:
        updated = client.update_trace_settings(level=["TIMESTAMPS", "TENSORS"], rate=1)
        assert set(updated.level) == {"TIMESTAMPS", "TENSORS"}
        assert updated.rate == 1
        assert updated.file == str(trace_file)
        assert client.trace_settings() == updated
        model = client.update_trace_settings("scale", level="OFF")
        assert model.level == ("OFF",)
        assert client.trace_settings("scale").level == ("OFF",)
        assert set(client.trace_settings().level) == {"TIMESTAMPS", "TENSORS"}
    finally:
        client.update_trace_settings("scale", level=original.level, rate=original.rate)
        client.update_trace_settings(level=original.level, rate=original.rate)
    assert client.trace_settings() == original
