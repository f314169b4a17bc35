"""OpenTelemetry for triton_sdk: a span for each attempt of each call, and the W3C trace
context sent to Triton so that its own traces join yours.

    import triton_sdk.otel
    client = ts.Client(url, hooks=[triton_sdk.otel.Tracing()])

Needs ``opentelemetry-api`` (``pip install "triton-sdk-py[otel]"``) and, to export the
spans, an SDK and exporter configured as usual. Works on all four transports: the hook
sees every attempt in the caller's thread or task, and puts ``traceparent`` (and any
other field of the configured propagator) in the request's headers.

Span names are ``triton_sdk <call>`` (``triton_sdk infer``); attributes follow the RPC
semantic conventions (``rpc.system``, ``rpc.service``, ``rpc.method``,
``server.address``, ``server.port``) plus ``triton.model``, ``triton.attempt``,
``triton.batch_size`` and ``triton.request.bytes`` / ``triton.response.bytes`` for
inference, and the error's class and status on failure. A stream's span ends with its
first response (or its failure). A span whose attempt had neither (a stream that ended
without a response or was left before one, a call cancelled) ends with the attempt, its
status unset and ``triton.answered`` false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import __version__
from ._call import AnyOp, CallContext, CallHook
from ._errors import TritonError
from ._ops import StreamInfer
from ._request import InferRequest
from ._result import InferResult, data_size

__all__ = ["Tracing"]

_SPAN = "triton_sdk.span"


class Tracing(CallHook):
    """A :class:`~triton_sdk.CallHook` that traces calls with OpenTelemetry.

    Args:
        tracer_provider: where spans go; the global one by default.
        propagate_context: put the trace context in the requests' headers (W3C
            ``traceparent``, by the configured propagator) so that Triton's traces
            (``--trace-config``) continue yours.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, propagate_context: bool = True
    ) -> None:
        self._tracer: Tracer = trace.get_tracer("triton_sdk", __version__, tracer_provider)
        self._propagate = propagate_context
        self._key = f"{_SPAN}.{id(self)}"  # (a client may have more than one Tracing)

    def before_send(self, op: AnyOp, ctx: CallContext) -> None:
        span = self._tracer.start_span(
            f"triton_sdk {ctx.call}", kind=SpanKind.CLIENT, attributes=_attributes(op, ctx)
        )
        ctx.state[self._key] = span
        if self._propagate:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            if carrier:
                ctx.headers = {**ctx.headers, **carrier}

    def after_receive(self, op: AnyOp, ctx: CallContext, result: object) -> None:
        span: Span | None = ctx.state.pop(self._key, None)
        if span is None:
            return  # a stream's later responses
        span.set_attributes(_server(ctx.url))  # (a client over many: where it went)
        if isinstance(result, InferResult):
            span.set_attribute("triton.response.bytes", result.nbytes)
        span.set_status(Status(StatusCode.OK))
        span.end()

    def on_error(self, op: AnyOp, ctx: CallContext, error: TritonError) -> None:
        span: Span | None = ctx.state.pop(self._key, None)
        if span is None:
            return
        span.set_attributes(_server(ctx.url))
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__name__)
        if error.status is not None:
            span.set_attribute("triton.status", str(error.status))
        span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end()

    def on_end(self, op: AnyOp, ctx: CallContext) -> None:
        span: Span | None = ctx.state.pop(self._key, None)
        if span is None:
            return  # ended by its answer or its error
        span.set_attributes(_server(ctx.url))
        span.set_attribute("triton.answered", False)
        span.end()


def _server(url: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a URL."""
    parts = urlsplit(url) if url else None
    if parts is None or not parts.hostname:
        return {}
    if parts.port is None:
        return {"server.address": parts.hostname}
    return {"server.address": parts.hostname, "server.port": parts.port}


def _attributes(op: AnyOp, ctx: CallContext) -> Mapping[str, Any]:
    grpc = ctx.url.startswith("grpc")  # (grpc:// and grpcs://)
    attributes: dict[str, Any] = {
        "rpc.system": "grpc" if grpc else "http",
        "rpc.service": "inference.GRPCInferenceService" if grpc else "triton.v2",
        "rpc.method": ctx.call,
        "triton.attempt": ctx.attempt,
    }
    attributes.update(_server(ctx.url))
    if ctx.model is not None:
        attributes["triton.model"] = ctx.model
    if isinstance(op, StreamInfer):
        op = op.request
    if isinstance(op, InferRequest):
        if op.version:
            attributes["triton.model.version"] = op.version
        if op.inputs and op.inputs[0].array.ndim:
            attributes["triton.batch_size"] = int(op.inputs[0].array.shape[0])
        attributes["triton.request.bytes"] = sum(data_size(tensor.array) for tensor in op.inputs)
    return attributes
