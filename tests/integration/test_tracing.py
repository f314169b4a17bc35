"""OpenTelemetry: a span per attempt on all four transports, and the trace context that
reaches the model (the session server forwards ``traceparent`` to it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import triton_sdk as ts

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from triton_sdk.otel import Tracing


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_an_infer_is_a_span_whose_context_reaches_the_model(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter], protocol: str
) -> None:
    provider, exporter = spans
    client = make_client(hooks=[Tracing(provider)])
    model = client.model("echo_headers")
    exporter.clear()
    result = model.infer(INPUT=[[1], [2]])
    (span,) = exporter.get_finished_spans()
    assert span.name == "triton_sdk infer"
    attributes = dict(span.attributes or {})
    assert attributes["rpc.system"] == protocol
    assert attributes["rpc.method"] == "infer"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["triton.model"] == "echo_headers"
    assert attributes["triton.batch_size"] == 2
    assert attributes["triton.request.bytes"] == 8
    assert int(attributes["triton.response.bytes"]) > 0
    assert span.status.status_code is StatusCode.OK
    parameters = json.loads(result.as_strings("HEADERS").reshape(-1)[0])
    seen = {name.lower(): value for name, value in parameters.items()}
    version, trace_id, parent_id, _ = seen["traceparent"].split("-")
    assert version == "00"
    assert int(trace_id, 16) == span.context.trace_id
    assert int(parent_id, 16) == span.context.span_id


def test_text_is_counted_by_its_bytes_not_the_arrays_pointers(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    # An object array's nbytes is 8 per element, whatever the text: both sizes were 24.
    provider, exporter = spans
    client = make_client(hooks=[Tracing(provider)])
    model = client.model("upper")
    exporter.clear()
    words = ["안녕하세요", "hello", "x" * 1000]
    result = model.infer(TEXT=words)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    wire = sum(4 + len(word.encode()) for word in words)  # each with its 4-byte length
    assert attributes["triton.request.bytes"] == wire
    assert attributes["triton.response.bytes"] == wire
    assert result.nbytes == wire


def test_a_failed_call_is_an_error_span(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    client = make_client(hooks=[Tracing(provider)])
    with pytest.raises(ts.ModelNotFoundError):
        client.model_spec("no_such_model")
    failed = [span for span in exporter.get_finished_spans() if span.name.endswith("metadata")]
    assert failed
    assert failed[0].status.status_code is StatusCode.ERROR
    assert dict(failed[0].attributes or {})["error.type"] == "ModelNotFoundError"


def test_a_stream_without_responses_ends_its_span(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    client = make_client(hooks=[Tracing(provider)])
    model = client.model("generator")
    exporter.clear()
    assert list(model.generate_stream(text_input="a", max_tokens=0)) == []
    (span,) = exporter.get_finished_spans()
    assert span.name == "triton_sdk generate_stream"
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {})["triton.answered"] is False


def test_two_tracing_hooks_each_end_their_own_spans(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    # (Both kept their span under one key: the first ended the second's, and its own
    # spans never ended.)
    provider, exporter = spans
    other_exporter = InMemorySpanExporter()
    other = TracerProvider()
    other.add_span_processor(SimpleSpanProcessor(other_exporter))
    client = make_client(hooks=[Tracing(provider), Tracing(other, propagate_context=False)])
    model = client.model("upper")
    exporter.clear()
    other_exporter.clear()
    model.infer(TEXT=["a"])
    with pytest.raises(ts.ModelNotFoundError):
        client.model_spec("no_such_model")
    for finished in (exporter.get_finished_spans(), other_exporter.get_finished_spans()):
        names = [span.name for span in finished]
        assert names[0] == "triton_sdk infer"
        assert finished[0].status.status_code is StatusCode.OK
        failed = [span for span in finished if span.name.endswith("metadata")]
        assert failed[0].status.status_code is StatusCode.ERROR
        assert all(span.end_time is not None for span in finished)
        assert len({span.context.span_id for span in finished}) == len(finished)
    other.shutdown()


def test_a_stream_span_counts_its_request(
    make_client: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    client = make_client(hooks=[Tracing(provider)])
    model = client.model("repeat")
    exporter.clear()
    assert len(list(model.stream(IN=[1, 2, 3]))) == 3
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "triton_sdk stream"
    assert attributes["triton.batch_size"] == 3  # (repeat has no batch axis: IN's length)
    assert attributes["triton.request.bytes"] == 12
    assert attributes["triton.response.bytes"] == 8  # the first response: OUT and IDX
