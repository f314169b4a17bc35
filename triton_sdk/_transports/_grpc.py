"""gRPC transports on the service stubs that tritonclient ships.

They send what ``_grpc_codec`` builds on a channel configured here, and map every
``grpc.RpcError`` to a :class:`TritonError` (``_errors``) with the original as
``__cause__``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc
import grpc.aio
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from .._call import CallContext
from .._compression import Compression
from .._concurrency import aclose_iterator, within
from .._config import Endpoint, TLSConfig
from .._errors import (
    InferenceError,
    InvalidInputError,
    TritonError,
    TritonTimeoutError,
    timeout_message,
)
from .._grpc_codec import (
    SERVICE,
    GrpcCall,
    GrpcCollect,
    GrpcStream,
    encode,
    encode_stream,
)
from .._ops import Op, OpenAIEvents, StreamOp
from ._errors import (
    closed_before_sending,
    closed_by_aclose,
    closed_in_flight,
    grpc_error,
    raise_if_cut_by_close,
    refused_error,
    task_cancelled,
)
from ._http_pool import ssl_context
from ._loop import check_loop, check_open_loop
from ._openai import openai_events, openai_events_async
from ._own_url import OWN_URL_CALLS, OwnTLS, own_url_acall, own_url_call

__all__ = ["AsyncGrpcTransport", "GrpcTransport", "channel_options"]

T = TypeVar("T")

MAX_MESSAGE_BYTES: Final = 2**31 - 1


def channel_options(tls: TLSConfig | None = None) -> list[tuple[str, Any]]:
    """The complete channel argument list.

    gRPC takes the list as a whole, so the 2 GiB message limits must be in it (without
    them the receive limit falls back to 4 MiB). The short reconnect backoff (100 ms,
    growing to at most 250 ms) lets a client find a restarted server within a quarter
    of a second instead of 1-3 s (or, after a long outage, up to two minutes).

    ``grpc.min_reconnect_backoff_ms`` is left at gRPC's default on purpose: gRPC also
    uses it as the shortest time a connection attempt may take, and set to 100 ms it
    abandons every handshake over a link slower than that (a TLS handshake across zones).
    A call's own timeout bounds the wait instead.

    gRPC's own retry policy is not configured: it silently skips requests over 256 KiB,
    and one retry layer (the SDK's) is easier to reason about.
    """
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 2**31 - 1),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 250),
    ]
    if tls is not None and tls.server_hostname:
        options.append(("grpc.ssl_target_name_override", tls.server_hostname))
    return options


def _credentials(tls: TLSConfig | None) -> grpc.ChannelCredentials:
    """The channel's TLS credentials. The files are checked the way the HTTP transports
    check them, so that an unusable certificate or key is an InvalidInputError when the
    client is made, not a handshake failure at the first call."""
    ssl_context(tls)

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read TLS file {path}: {exc}") from exc

    tls = tls or TLSConfig()
    return grpc.ssl_channel_credentials(
        root_certificates=read(tls.ca_file),
        private_key=read(tls.key_file),
        certificate_chain=read(tls.cert_file),
    )


class _Metadata:
    """gRPC metadata for the headers of a call; the last one is kept, since calls mostly
    carry the client's own headers. gRPC refuses upper-case keys on the client side."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # One attribute holds the pair, so that no thread sees one call's headers with
        # another's metadata.
        self._last: tuple[Mapping[str, str] | None, tuple[tuple[str, str], ...] | None] = (
            None,
            None,
        )

    def __call__(self, headers: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
        last = self._last
        if last[0] is headers:
            return last[1]
        metadata = tuple((key.lower(), value) for key, value in headers.items()) or None
        if metadata is not None and any(key == "user-agent" for key, _ in metadata):
            raise InvalidInputError(
                "header 'user-agent' cannot be sent over gRPC: gRPC puts its own in its "
                "place (send it over HTTP, or under another name)"
            )
        self._last = (headers, metadata)
        return metadata


CUT_CALLS_SETTLE: Final = 0.02
"""Seconds AsyncClient.aclose() leaves gRPC to end the calls it cut off."""

STREAM_CLOSE_GRACE: Final = 5.0
"""Seconds a stream whose request has had its last response is left for the server to
close before it is cancelled."""


def _disarm_stop(ctx: CallContext) -> None:
    """The request of a stream has had its last response: from now on the stream is left
    for the server to close, never cancelled, whatever the reader does. A cancellation
    that races the server's own close can crash older Triton releases
    (triton-inference-server/server#7368, #8034)."""
    if ctx._stop is not None:
        ctx._stop.disarm()


def _let_close(call: Any) -> None:
    """Wait for the server to close an answered stream; cancel one it leaves open."""
    closed = threading.Event()
    call.add_done_callback(lambda _: closed.set())
    if not closed.wait(STREAM_CLOSE_GRACE):
        call.cancel()


def _method(
    stub: Any, channel: Any, wire_methods: dict[tuple[str, str], Any], call: GrpcCall[Any]
) -> Any:
    """The channel's method for ``call``: the stub's, or (``call.wire``) one that sends and
    receives wire bytes as they are, unary or (``call.streamed``) stream-unary, made once
    per RPC and kind."""
    if not call.wire:
        return getattr(stub, call.rpc)
    key = (call.rpc, "stream-unary" if call.streamed else "unary")
    method = wire_methods.get(key)
    if method is None:
        path = f"/{SERVICE}/{call.rpc}"
        kind = channel.stream_unary if call.streamed else channel.unary_unary
        method = wire_methods[key] = kind(path)
    return method


def _stream_method(channel: Any, methods: dict[tuple[str, str], Any], bare: bool) -> Any:
    """``ModelStreamInfer`` for one request, reading Triton's messages or (``bare``, see
    :class:`GrpcStream`) plain ``ModelInferResponse`` ones; made once per kind.

    It is called as unary-stream: the one message and the half-close go in one batch,
    the same bytes on the wire as a bidirectional call's. On a stream-stream call,
    grpc.aio's ``write`` can lose the race with a server that ends the call at once
    (UNIMPLEMENTED on a server without streams), and the caller then sees "Internal
    error from Core" instead of the server's status.
    """
    key = ("ModelStreamInfer", "bare" if bare else "triton")
    method = methods.get(key)
    if method is None:
        response = pb.ModelInferResponse if bare else pb.ModelStreamInferResponse
        method = methods[key] = channel.unary_stream(
            f"/{SERVICE}/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=response.FromString,
        )
    return method


def _response_timeout(
    timeout: float | None, op: StreamOp[Any] | Op[Any], whole: bool = False
) -> TritonTimeoutError:
    # (the words of an HTTP stream's timeout)
    message = timeout_message(
        op.model, timeout, "the whole call's timeout" if whole else "timed out"
    )
    return TritonTimeoutError(message, model=op.model, request_id=op.request_id, may_have_run=True)


def _ended_early(op: StreamOp[Any] | Op[Any]) -> InferenceError:
    """The error of a Triton stream that the server ended (status OK) before its request's
    final response: what came may be all or part of the answer."""
    return InferenceError(
        "the server ended the stream before the request's final response: its responses "
        "may be incomplete",
        model=op.model,
        request_id=op.request_id,
        may_have_run=True,
    )


def _wait(timeout: float | None, deadline: float | None) -> float | None:
    """How long to wait for the next response: ``timeout``, or what is left before
    ``deadline`` when the timeout bounds the whole call."""
    return timeout if deadline is None else max(0.0, deadline - time.monotonic())


def _deadline(timeout: float | None, whole: bool) -> float | None:
    return time.monotonic() + timeout if whole and timeout is not None else None


_END: Final = object()
_STOPPED: Final = object()


_ALGORITHMS: Final = {
    None: None,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}


def _call_error(
    exc: grpc.RpcError, op: Op[Any] | StreamOp[Any], ctx: CallContext, tls: bool, closed: bool
) -> TritonError:
    """A failed call's error; a call that closing the client cancelled says so."""
    if closed:
        return closed_in_flight()
    return grpc_error(exc, op, tls=tls, timeout=ctx.timeout)


class GrpcTransport:
    """Blocking gRPC. grpc's channel is thread-safe, so one transport serves all threads."""

    def __init__(
        self, endpoint: Endpoint, *, tls: TLSConfig | None, compression: Compression = None
    ) -> None:
        self.endpoint = endpoint
        self._own_tls = OwnTLS(tls, lambda: (endpoint.host,))
        self._tls = tls
        self._compression = _ALGORITHMS[compression]
        target = endpoint.authority
        if endpoint.tls:
            self._channel = grpc.secure_channel(
                target, _credentials(tls), options=channel_options(tls)
            )
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options(tls))
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._methods: dict[tuple[str, str], Any] = {}
        self._metadata = _Metadata()
        self._closed = False

    def call(self, op: Op[T], ctx: CallContext) -> T:
        if isinstance(op, OWN_URL_CALLS):
            return own_url_call(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        encoded = encode(op)
        if isinstance(encoded, GrpcCollect):
            items: list[Any] = []
            stream = self._stream(encoded.stream, op, ctx, whole=True)
            try:
                for item in stream:
                    items.append(item)
                    if encoded.most is not None and len(items) > encoded.most:
                        break
            finally:
                stream.close()  # (left early: cancels the call)
            return encoded.collect(items)
        return encoded.read(self._unary(encoded, op, ctx))

    def _unary(self, call: GrpcCall[Any], op: Op[Any] | StreamOp[Any], ctx: CallContext) -> Any:
        method = _method(self._stub, self._channel, self._methods, call)
        try:
            return method(
                call.take() if call.streamed else call.message,
                timeout=ctx.timeout,
                metadata=self._metadata(ctx.headers),
                compression=self._compression,
            )
        except InvalidInputError:  # (the client's own refusal: a header it will not send)
            raise
        except ValueError as exc:  # a closed channel, or metadata grpc will not send
            raise self._refused(exc) from exc
        except grpc.RpcError as exc:
            raise self._failed(exc, op, ctx) from exc

    def stream(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        if isinstance(op, OpenAIEvents):
            yield from openai_events(op, ctx, self._own_tls(op.url))  # type: ignore[misc]
            return
        encoded = encode_stream(op)
        if isinstance(encoded, GrpcCall):
            reply = self._stoppable_unary(encoded, op, ctx)
            if reply is not _STOPPED:
                yield encoded.read(reply)
            return
        yield from self._stream(encoded, op, ctx)

    def _stoppable_unary(self, call: GrpcCall[Any], op: StreamOp[Any], ctx: CallContext) -> Any:
        """The answer of a stream sent as one inference (``generate_stream`` on a model
        that is not decoupled); ``_STOPPED`` when another thread stopped it, as it stops
        a stream (ResponseStream.close)."""
        stop = ctx._stop
        if stop is None:
            return self._unary(call, op, ctx)
        method = _method(self._stub, self._channel, self._methods, call)
        try:
            pending = method.future(
                call.take() if call.streamed else call.message,
                timeout=ctx.timeout,
                metadata=self._metadata(ctx.headers),
                compression=self._compression,
            )
        except InvalidInputError:  # (the client's own refusal: a header it will not send)
            raise
        except ValueError as exc:
            raise self._refused(exc) from exc
        stop.arm(pending.cancel)
        try:
            return pending.result()
        except grpc.FutureCancelledError:
            if self._closed:
                raise closed_in_flight() from None
            return _STOPPED
        except grpc.RpcError as exc:
            raise self._failed(exc, op, ctx) from exc

    def _stream(
        self,
        stream: GrpcStream[T],
        op: Op[Any] | StreamOp[Any],
        ctx: CallContext,
        whole: bool = False,
    ) -> Generator[T, None, None]:
        """The responses of one request on a ModelStreamInfer call of its own.

        gRPC's blocking stream iterator has no timeout, so a reader thread moves the
        messages to a queue that is read with the timeout per response (``whole``: for
        the whole stream). Closing the generator (a ``break`` in the caller's loop)
        cancels the call, which stops the request on the server.
        """
        try:
            method = _stream_method(self._channel, self._methods, stream.bare)
            call = method(
                stream.message,
                metadata=self._metadata(ctx.headers),
                compression=self._compression,
            )
        except InvalidInputError:  # (the client's own refusal: a header it will not send)
            raise
        except ValueError as exc:
            raise self._refused(exc) from exc
        if ctx._stop is not None:
            ctx._stop.arm(call.cancel)
        # (message, whether it is the request's last), then _END; or an RpcError, then _END.
        messages: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for message in call:
                    last = stream.is_last(message)
                    messages.put((message, last))
                    if last:
                        _let_close(call)  # (here: the caller does not wait for it)
                        return
            except grpc.RpcError as exc:
                messages.put(exc)
            messages.put(_END)

        threading.Thread(target=read, name="triton_sdk-stream", daemon=True).start()
        timeout = ctx.timeout
        deadline = _deadline(timeout, whole)
        answered = False
        try:
            while True:
                try:
                    entry = messages.get(timeout=_wait(timeout, deadline))
                except queue.Empty:
                    raise _response_timeout(timeout, op, whole) from None
                if entry is _END:
                    if not stream.bare:
                        raise _ended_early(op)
                    break
                if isinstance(entry, grpc.RpcError):
                    raise self._failed(entry, op, ctx) from entry
                message, answered = entry
                if answered:
                    _disarm_stop(ctx)
                item = stream.read(message)
                if item is not None:
                    yield item
                if answered:
                    break
            last = stream.last_item()
            if last is not None:
                yield last
        finally:
            if not answered:
                call.cancel()  # (an answered one is left to close: see _disarm_stop)

    def _refused(self, exc: ValueError) -> TritonError:
        return closed_before_sending() if self._closed else refused_error(exc)

    def _failed(
        self, exc: grpc.RpcError, op: Op[Any] | StreamOp[Any], ctx: CallContext
    ) -> TritonError:
        return _call_error(exc, op, ctx, self.endpoint.tls, self._closed)

    def close(self) -> None:
        self._closed = True
        self._channel.close()


class AsyncGrpcTransport:
    """gRPC on asyncio. The channel is opened on first use, inside the running loop."""

    def __init__(
        self, endpoint: Endpoint, *, tls: TLSConfig | None, compression: Compression = None
    ) -> None:
        self.endpoint = endpoint
        self._own_tls = OwnTLS(tls, lambda: (endpoint.host,))
        self._tls = tls
        self._compression = _ALGORITHMS[compression]
        self._credentials = _credentials(tls) if endpoint.tls else None
        self._metadata = _Metadata()
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._methods: dict[tuple[str, str], Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._graces: set[asyncio.TimerHandle] = set()
        """The grace timers of answered streams (see STREAM_CLOSE_GRACE), which hold
        their calls, and so the connection, until they fire or close() cancels them."""
        self._cut = False
        """Whether a call was cut off (see aclose)."""

    def _open(self) -> Any:
        self._loop = check_loop(self._loop)
        if self._stub is not None:
            return self._stub
        if self._closed:
            raise closed_by_aclose()
        target = self.endpoint.authority
        if self._credentials is not None:
            self._channel = grpc.aio.secure_channel(
                target, self._credentials, options=channel_options(self._tls)
            )
        else:
            self._channel = grpc.aio.insecure_channel(target, options=channel_options(self._tls))
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    async def acall(self, op: Op[T], ctx: CallContext) -> T:
        if isinstance(op, OWN_URL_CALLS):
            return await own_url_acall(op, ctx, self._own_tls(op.url))  # type: ignore[no-any-return]
        encoded = encode(op)
        if isinstance(encoded, GrpcCollect):
            items: list[Any] = []
            stream = self._stream(encoded.stream, op, ctx, whole=True)
            try:
                async for item in stream:
                    items.append(item)
                    if encoded.most is not None and len(items) > encoded.most:
                        break
            finally:
                await stream.aclose()  # (left early: cancels the call)
            return encoded.collect(items)
        try:
            reply = await self._unary(encoded, ctx)
        except grpc.RpcError as exc:
            raise self._failed(exc, op, ctx) from exc
        except asyncio.CancelledError as exc:
            self._cut = True
            raise_if_cut_by_close(exc, self._closed)
            raise
        return encoded.read(reply)

    def _unary(self, call: GrpcCall[Any], ctx: CallContext) -> Any:
        """The call in flight (awaited by the caller, which maps its errors: one coroutine
        less on the hot path)."""
        method = _method(self._open(), self._channel, self._methods, call)
        return method(
            call.take() if call.streamed else call.message,
            timeout=ctx.timeout,
            metadata=self._metadata(ctx.headers),
            compression=self._compression,
        )

    async def astream(self, op: StreamOp[T], ctx: CallContext) -> AsyncIterator[T]:
        if isinstance(op, OpenAIEvents):
            events = openai_events_async(op, ctx, self._own_tls(op.url))
            try:
                async for event in events:
                    yield event  # type: ignore[misc]
            finally:
                await aclose_iterator(events)  # cancels the request now, not when collected
            return
        encoded = encode_stream(op)
        if isinstance(encoded, GrpcCall):
            pending = self._unary(encoded, ctx)
            stop = ctx._stop
            if stop is not None:  # another task may stop it, as it stops a stream
                stop.arm(pending.cancel)
            try:
                reply = await pending
            except grpc.RpcError as exc:
                raise self._failed(exc, op, ctx) from exc
            except asyncio.CancelledError as exc:
                self._cut = True
                if stop is not None and stop.requested and not task_cancelled():
                    return  # stopped by another task (ResponseStream.aclose)
                raise_if_cut_by_close(exc, self._closed)
                raise
            yield encoded.read(reply)
            return
        responses = self._stream(encoded, op, ctx)
        try:
            async for item in responses:
                yield item
        finally:
            await aclose_iterator(responses)  # cancels the call now, not when collected

    async def _stream(
        self,
        stream: GrpcStream[T],
        op: Op[Any] | StreamOp[Any],
        ctx: CallContext,
        whole: bool = False,
    ) -> AsyncGenerator[T, None]:
        """The responses of one request on a ModelStreamInfer call of its own; the
        timeout bounds each response's wait (``whole``: the whole stream's)."""
        self._open()
        method = _stream_method(self._channel, self._methods, stream.bare)
        call = method(
            stream.message, metadata=self._metadata(ctx.headers), compression=self._compression
        )
        if ctx._stop is not None:
            ctx._stop.arm(call.cancel)
        timeout = ctx.timeout
        deadline = _deadline(timeout, whole)
        answered = False
        try:
            try:
                while True:
                    try:
                        message = await within(call.read(), _wait(timeout, deadline))
                    except asyncio.TimeoutError:
                        raise _response_timeout(timeout, op, whole) from None
                    if message is grpc.aio.EOF:
                        if not stream.bare:
                            raise _ended_early(op)
                        break
                    answered = stream.is_last(message)
                    if answered:
                        _disarm_stop(ctx)
                    item = stream.read(message)
                    if item is not None:
                        yield item
                    if answered:
                        break
                last = stream.last_item()
                if last is not None:
                    yield last
            except grpc.RpcError as exc:
                raise self._failed(exc, op, ctx) from exc
            except asyncio.CancelledError as exc:
                stop = ctx._stop
                if stop is not None and stop.requested and not task_cancelled():
                    return  # stopped by another task (ResponseStream.aclose)
                raise_if_cut_by_close(exc, self._closed)
                raise
        finally:
            if answered:
                self._leave_for_the_server(call)
            else:
                call.cancel()
                self._cut = True

    def _leave_for_the_server(self, call: Any) -> None:
        """Wait for the server to close an answered stream; cancel one it leaves open
        after STREAM_CLOSE_GRACE (cancelling a finished call does nothing)."""
        if call.done():
            return
        grace = asyncio.get_running_loop().call_later(STREAM_CLOSE_GRACE, call.cancel)
        graces = self._graces
        graces.add(grace)

        def closed(_: object) -> None:
            grace.cancel()
            graces.discard(grace)

        call.add_done_callback(closed)

    def _failed(
        self, exc: grpc.RpcError, op: Op[Any] | StreamOp[Any], ctx: CallContext
    ) -> TritonError:
        return _call_error(exc, op, ctx, self.endpoint.tls, self._closed)

    def refuse_other_loop(self) -> None:
        """Raise the documented TritonError when called in a loop other than its own
        (see check_open_loop)."""
        check_open_loop(self._loop)

    async def aclose(self) -> None:
        self.refuse_other_loop()
        self._closed = True
        for grace in self._graces:  # (closing the channel ends their calls)
            grace.cancel()
        self._graces.clear()
        if self._channel is not None:
            await self._channel.close()
            if self._cut:
                # A call cut off (cancelled, timed out while reading) has operations that
                # end on gRPC's poller thread a moment later. Once this loop is closed
                # they log "RuntimeError: Event loop is closed" in the process's next loop
                # (asyncio.run after asyncio.run, a test suite's loop per test).
                await asyncio.sleep(CUT_CALLS_SETTLE)
            self._channel = None
            self._stub = None
            self._methods.clear()
