# Generated from _async_client.py by scripts/unasync.py: edit that file, not this one.
"""The blocking client and its model handle."""

# _client.py (blocking) is generated from _async_client.py (asyncio) by scripts/unasync.py:
# edit _async_client.py, then run the script; `nox -s lint` fails when _client.py is stale.
# Where blocking and asyncio code really differ, both call the named twins of _concurrency.

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
import warnings
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, Final, Generic, Literal, NoReturn, TypeVar, overload

import attrs
from tenacity import Retrying

from ._balance import Discovery, EndpointState, same_endpoint
from ._base import (
    DEFAULT_RESOLVE_INTERVAL,
    ClientSettings,
    HttpBinary,
    ModelCore,
    Resolver,
    SequenceFlags,
    Timeout,
    check_tls_used,
    client_repr,
    closed_error,
    closed_while_retrying,
    config_json,
    merge_fields,
    start_wait_timed_out,
    with_suggestions,
)
from ._call import (
    CallContext,
    CallHook,
    CallOptions,
    StreamStop,
    end_attempt,
    run_after_receive,
    run_before_send,
    run_on_error,
)
from ._chat_template import Message
from ._checks import check_timeout
from ._classify import Classification, parse_classifications
from ._compression import Compression
from ._concurrency import (
    ChunkRunner,
    Gate,
    Samples,
    Window,
    close_iterator,
    current_worker,
    iterate,
    shielded,
    sleep,
    wait_until,
)
from ._config import (
    DEFAULT_TIMEOUT,
    NOT_GIVEN,
    Endpoint,
    NotGiven,
    RetryBudget,
    RetryPolicy,
    TLSConfig,
    check_openai_url,
    redact_url,
)
from ._errors import (
    MALFORMED_ANSWER,
    InferenceError,
    InvalidInputError,
    ModelNotFoundError,
    TritonConnectionError,
    TritonError,
    TritonTimeoutError,
    UnsupportedError,
    heals_by_waiting,
    in_split_batch,
    names_no_server,
    refuse_error_body,
    unreadable_answer,
    unsupported_operation,
)
from ._generate import JSONValue, check_generate, check_not_inputs, tensors_to_fields
from ._llm import Adapter, LLMCall, SamplingValue, StreamAssembler, plain_options
from ._llm_types import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk
from ._map import MapPlan, Outcome, PreparedSample, check_samples, progress_bar
from ._openai_route import (
    Route,
    chat_body,
    check_route,
    completion_body,
    include_usage,
    reader,
)
from ._operations import (
    LogSettings,
    ModelStatistics,
    ServerMetrics,
    TraceSettings,
    log_updates,
    trace_updates,
)
from ._ops import (
    JSON,
    FetchMetrics,
    Generate,
    GenerateStream,
    GetCudaSharedMemoryStatus,
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
    ListModels,
    LoadModel,
    Op,
    OpenAIEvents,
    OpenAIPost,
    StreamInfer,
    StreamOp,
    UnloadModel,
    UpdateLogSettings,
    UpdateTraceSettings,
)
from ._request import InferRequest, ParameterInput, Priority, check_parameters
from ._result import InferResult
from ._retry import StopAt, TokenBucket, final_error, retrying_kwargs, should_retry
from ._sequence import (
    SENDING,
    Delivery,
    OpenSequences,
    SequenceState,
    check_end,
    mark_outcome,
    mark_reached,
)
from ._shaping import InputValue
from ._shm import (
    AnyRegion,
    NoRoomForRegion,
    Placement,
    PlacementPlan,
    RegionPool,
    SharedMemory,
    SharedMemoryOutputs,
    check_mode,
    check_outputs,
    cuda_device,
    guards_regions_in_use,
    may_still_run,
    note_resend,
    on_sockets,
    place,
    regions_lost,
    remove_stale_files,
    stale_regions,
)
from ._spec import ModelSpec
from ._status import (
    CudaSharedMemoryRegion,
    ModelStatus,
    ServerMetadata,
    SharedMemoryRegion,
    not_ready_because,
)
from ._streams import ResponseStream
from ._transports._balanced import BalancedTransport
from ._transports._loop import refuse_another_loop
from ._transports._metrics import metrics_url_read
from ._transports._protocol import Transport

__all__ = [
    "Chat",
    "ChatCompletions",
    "Client",
    "Completions",
    "Model",
    "ModelSequence",
]

T = TypeVar("T")
Chunk = TypeVar("Chunk", ChatCompletionChunk, CompletionChunk)

Headers = Mapping[str, str] | None

logger = logging.getLogger("triton_sdk")

DEFAULT_RETRY: Final = RetryPolicy()
DEFAULT_BUDGET: Final = RetryBudget()
_ONCE: Final = RetryPolicy.none()
_POLL_INTERVAL: Final = 0.1
_STILL_HELD_WAITS: Final = (0.01, 0.02, 0.05, 0.1, 0.2)
"""The waits before asking again, at close, to unregister a region the server still held
for a finished call (0.38 s in all)."""
_IN_USE: Final = "in use"
_KSERVE_LOSS: Final = ("NOT_FOUND", "UNKNOWN")
_SPEC_READS: Final = 3  # (a spec's reads, again where they moved: at most this often)
_REGISTRATIONS_WAIT: Final = 5.0
_CLOSE_WAIT: Final = 30.0
"""How long a second close waits for the first to end (its calls have their timeouts)."""
_ONE_SERVER_SHM: Final = (
    'shared_memory="system" (or "cuda") needs a client of one server; a client over many '
    "endpoints sends every tensor over sockets"
)
_JSON_HTTP_SHM: Final = (
    'shared_memory="system" (or "cuda") needs tensors in Triton\'s binary HTTP '
    '(http_binary=True or "auto"); with http_binary=False every tensor goes over sockets'
)
_SOCKETS_ONLY_MODES: Final = ("auto", "off")
_SYSTEM: Final = ("auto", "system")


def _bucket(budget: object) -> TokenBucket | None:
    if budget is None:
        return None
    if not isinstance(budget, RetryBudget):
        raise InvalidInputError(
            f"retry_budget must be a ts.RetryBudget or None, got {type(budget).__name__}"
        )
    return TokenBucket(budget)


def _open_transport(settings: ClientSettings, budget: TokenBucket | None) -> Transport:
    """The transport of the client's URL (or URLs); its network library is imported
    only now."""

    def open_endpoint(endpoint: Endpoint) -> Transport:
        return _open_endpoint(endpoint, settings)

    dns = settings.dns
    if dns is not None:
        discovery = Discovery(dns, settings.resolver, settings.resolve_interval)
        return BalancedTransport(
            [], open_endpoint, settings.headers, discovery, budget, settings.hooks, settings.tls
        )
    if len(settings.endpoints) == 1:
        return _open_endpoint(settings.endpoint, settings)
    endpoints = list(settings.endpoints)
    return BalancedTransport(
        endpoints, open_endpoint, settings.headers, None, budget, settings.hooks, settings.tls
    )


def _open_endpoint(endpoint: Endpoint, settings: ClientSettings) -> Transport:
    if endpoint.protocol == "grpc":
        from ._transports._grpc import GrpcTransport

        return GrpcTransport(endpoint, tls=settings.tls, compression=settings.compression)
    from ._transports._http import HttpTransport

    return HttpTransport(
        endpoint,
        tls=settings.tls,
        compression=settings.compression,
        max_connection_age=settings.max_connection_age,
        binary=settings.http_binary,
    )


class Client:
    """A blocking client for one Triton server, over gRPC or HTTP.

    ``Client("localhost:8001")`` and ``Client("grpc://...")`` speak gRPC,
    ``Client("http://...")`` HTTP; ``grpcs://`` and ``https://`` add TLS.
    One client may be shared by any number of threads, on both protocols, and may
    be called from code running inside an event loop (it never starts one).

    Args:
        url: the server's address, or a list of addresses of replicas of one model
            repository (one protocol): each call then goes to one of them, picked by
            fewest requests in flight; or ``dns:///name:port`` (gRPC) /
            ``dns+http:///name:port``: every address the name resolves to (a Kubernetes
            headless Service). See docs/scale-out.md.
        timeout: seconds each attempt of a call may take; ``None`` for no limit.
            Calls may override it with their own ``timeout``.
        retry: how failed idempotent calls are repeated; ``None`` or ``RetryPolicy.none()``
            for never.
        retry_budget: a bound on the retries of all calls together (by default 100 at
            once plus one per ten calls), so that an outage does not become a retry
            storm; ``None`` for no bound.
        headers: sent with every request (gRPC metadata keys are lower-cased); each
            call's ``headers`` are sent on top of them.
        tls: certificate files for ``grpcs://`` and ``https://``.
        metrics_url: the server's Prometheus endpoint, for :meth:`metrics`; by default
            the same host on port 8002 (Triton's default).
        transport: what carries the calls, instead of the one the URL names; e.g. a
            :class:`triton_sdk.testing.MockTransport` in tests.
        hooks: :class:`CallHook` objects that see every attempt of every call.
        shared_memory: ``"auto"`` sends large tensors through system shared memory when
            the server shares this host (sockets otherwise, decided at the first large
            call), ``"off"`` always uses sockets, ``"system"`` always shared memory for
            every numeric tensor, however small (a TritonError at the first call when the
            server cannot read this host's memory), ``"cuda"`` or ``"cuda:<device>"`` the
            same through regions of GPU memory (needs ``cuda-python``). BYTES tensors
            always travel over the socket.
        shared_memory_outputs: ``"view"`` (the default) hands out an output that came back
            through shared memory as an array over the region itself, with no copy; the
            region is not reused while that array, or any array made from it, lives.
            ``"copy"`` copies it out, so the region is free again as soon as the call ends.
        compression: ``"gzip"`` or ``"deflate"`` compresses request bodies and asks for
            compressed answers (HTTP; over gRPC the server compresses answers only when
            started to). Off (``None``) by default: on fast links it costs more CPU than it
            saves.
        resolver: for a ``dns:///`` URL, what turns the name into addresses (by default
            the system's resolver: A and AAAA records).
        resolve_interval: for a ``dns:///`` URL, seconds between two resolutions of the
            name (at least 0.05; it is also resolved again soon after a failure).
        max_connection_age: HTTP: seconds a kept-alive connection is reused for before
            a new one is made, so that the pods a Service adds get their share of a
            long-lived client's calls; ``None`` (the default) keeps connections while
            they work. (gRPC keeps one connection per endpoint: balance over the pods
            with a ``dns:///`` URL instead.)
        http_binary: how HTTP carries tensors: Triton's binary extension (``True``, the
            fast path), JSON ``data`` lists (``False``, which every Open Inference Protocol
            server reads), or ``"auto"`` (the default): binary when the server's metadata
            names Triton, JSON otherwise (read once, before the first inference). gRPC
            always carries raw bytes.
        openai_url: the base URL (``http://host:9000/v1``) of Triton's OpenAI-compatible
            frontend, for :attr:`chat` and :attr:`completions` calls routed there.
        route: where :attr:`chat` and :attr:`completions` calls go: ``"native"`` (Triton's
            own endpoints, through :meth:`Model.chat`), ``"openai"`` (the frontend
            at ``openai_url``), or ``"auto"`` (the default): the frontend for requests
            with ``tools`` when ``openai_url`` is set, the native endpoints otherwise.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = DEFAULT_RETRY,
        retry_budget: RetryBudget | None = DEFAULT_BUDGET,
        headers: Mapping[str, str] | None = None,
        tls: TLSConfig | None = None,
        metrics_url: str | None = None,
        transport: Transport | None = None,
        hooks: Iterable[CallHook] = (),
        shared_memory: SharedMemory = "auto",
        shared_memory_outputs: SharedMemoryOutputs = "view",
        compression: Compression = None,
        resolver: Resolver | None = None,
        resolve_interval: float = DEFAULT_RESOLVE_INTERVAL,
        max_connection_age: float | None = None,
        openai_url: str | None = None,
        route: Route = "auto",
        http_binary: HttpBinary = "auto",
    ) -> None:
        self._settings = ClientSettings.create(
            url,
            timeout=timeout,
            retry=retry,
            headers=headers,
            tls=tls,
            metrics_url=metrics_url,
            hooks=hooks,
            compression=compression,
            resolver=resolver,
            resolve_interval=resolve_interval,
            max_connection_age=max_connection_age,
            http_binary=http_binary,
        )
        self._shared_memory = check_mode(shared_memory)
        many = len(self._settings.endpoints) > 1 or self._settings.dns is not None
        json_http = self._settings.endpoint.protocol == "http" and http_binary is False
        self._sockets_only = _ONE_SERVER_SHM if many else _JSON_HTTP_SHM if json_http else None
        """Why this client sends every tensor over sockets (None: it need not)."""
        self._url = str(self._settings.endpoint)
        if self._sockets_only and self._shared_memory not in _SOCKETS_ONLY_MODES:
            raise InvalidInputError(self._sockets_only)
        self._output_views = check_outputs(shared_memory_outputs)
        if isinstance(transport, type):  # (a Protocol check passes the class itself)
            raise InvalidInputError(
                f"transport must be a ts.Transport, got the class {transport.__name__} "
                f"(make one: {transport.__name__}(...))"
            )
        if transport is not None and not isinstance(transport, Transport):
            raise InvalidInputError(
                f"transport must be a ts.Transport, got {type(transport).__name__}"
            )
        self._retry_bucket = _bucket(retry_budget)
        self._openai_url = None if openai_url is None else check_openai_url(openai_url).rstrip("/")
        check_tls_used(self._settings, self._openai_url)
        self._route = check_route(route)
        # What the client's own transports raise on an answer they cannot read becomes an
        # InferenceError; a transport given here (a test double) raises what it raises.
        self._malformed: tuple[type[Exception], ...] = MALFORMED_ANSWER if transport is None else ()
        self._checks_http_streams = transport is None and self._settings.endpoint.protocol == "http"
        """Streams to Triton go through the generate extension (one sample, no FP16): its
        transport would refuse what it cannot carry only at the first read."""
        if transport is None:
            transport = _open_transport(self._settings, self._retry_bucket)
        self._transport = transport
        self._chunks = ChunkRunner("Client")
        self._regions = RegionPool()
        self._cuda_regions: dict[int, RegionPool] = {}
        # None: not tried yet. Regions are registered with one server, and the calls of a
        # client over many endpoints go to any of them; JSON bodies cannot name regions:
        # sockets only.
        self._server_reads_our_memory: bool | None = False if self._sockets_only else None
        self._unread_memory_said = itertools.count()
        """Counts the calls that found the server cannot read this host's memory: the
        first says so (next() on it is atomic, where calls in threads find it together)."""
        self._server_guards_regions: bool | None = None
        """Whether the server refuses to unregister a region a request uses (None: not
        asked yet); see _free_abandoned."""
        self._closed = False
        self._closing = False
        """Set when close begins: from then on, no call places tensors in shared memory."""
        self._close_done = False
        """Set when close has ended: a second close waits for it."""
        self._closer: object = None
        """What runs the close (a thread, an asyncio task): a close within it returns."""
        self._registering: set[AnyRegion] = set()
        """Regions whose registration is in flight: close waits for them, then drains."""
        self._trimming: set[object] = set()
        """Markers of the surplus frees in flight (see _free_surplus): close waits too."""
        self._llm_models: dict[str, Model] = {}
        self._sequences = OpenSequences()
        self._has_config = True  # False once the server showed it has no config endpoint

    def __repr__(self) -> str:
        return client_repr("Client", self._settings)

    def __del__(self) -> None:
        # Collected without close: its registrations stay on the server until this
        # process has ended and a later client on this host sweeps them.
        if getattr(self, "_closed", True):  # (closed, or its constructor raised)
            return
        pools = [self._regions, *self._cuda_regions.values()]
        if any(pool.holds_registrations() for pool in pools):
            warnings.warn(
                f"{self!r} was not closed: its shared-memory regions stay registered on "
                "the server until this process ends",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )

    def __reduce__(self) -> NoReturn:
        # (copy.copy and deepcopy come here too: a copy would share the connections, and
        # closing it would close them under the original)
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied: it holds open "
            "connections; make one in each process (from the same URL and settings)"
        )

    @property
    def url(self) -> str:
        """The server's address, normalised (``grpc://host:port`` or ``http://host:port``);
        the first one of a client over many endpoints."""
        return str(self._settings.endpoint)

    def endpoints(self) -> list[EndpointState]:
        """Each endpoint's health and counters. A client of one URL keeps no counters: it
        reports its one endpoint as healthy, with zeros."""
        transport = self._transport
        if isinstance(transport, BalancedTransport):
            return transport.endpoints()
        return [EndpointState(self.url, True, 0, 0, 0, 0)]

    @property
    def chat(self) -> Chat:
        """OpenAI's call shape: ``client.chat.completions.create(model=..., messages=...)``."""
        return Chat(self)

    @property
    def completions(self) -> Completions:
        """OpenAI's call shape: ``client.completions.create(model=..., prompt=...)``."""
        return Completions(self)

    def _openai_target(
        self,
        route: Route | None,
        tools: object,
        timeout: Timeout,
        headers: Headers,
        path: str,
    ) -> tuple[str, CallOptions] | None:
        """The frontend's URL and the call's options when the call goes there, else None."""
        chosen = self._route if route is None else check_route(route)
        if chosen == "auto":
            chosen = "openai" if tools is not None and self._openai_url else "native"
        if chosen == "native":
            return None
        if self._openai_url is None:
            raise InvalidInputError(
                'route="openai" needs the frontend\'s URL: Client(..., openai_url="http://host:9000/v1")'
            )
        return f"{self._openai_url}/{path}", self._options(timeout, headers)

    def _llm_model(self, name: str, timeout: Timeout, headers: Headers) -> Model:
        model = self._llm_models.get(name)
        if model is None:
            model = self._llm_models[name] = self.model(name, timeout=timeout, headers=headers)
        return model

    # The call path: every server call goes through _run (unary) or _stream.

    def _options(
        self, timeout: Timeout, headers: Headers, retry: RetryPolicy | NotGiven | None = NOT_GIVEN
    ) -> CallOptions:
        if self._closed:
            raise closed_error("Client")
        return self._settings.options(timeout, retry, headers)

    def _send(self, op: Op[T], ctx: CallContext) -> T:
        """One attempt, seen by the hooks."""
        hooks = self._settings.hooks
        if hooks:
            ctx.url = str(getattr(op, "url", "")) or self._url  # (metrics, OpenAI: their own)
        try:
            if hooks:
                run_before_send(hooks, op, ctx)
            sequence_request = SENDING.get() is not None
            if sequence_request:
                mark_reached(op)
            try:
                try:
                    result = self._transport.call(op, ctx)
                except TritonError:
                    raise
                except self._malformed as exc:
                    raise unreadable_answer(exc, op.call, op.model) from exc
            except TritonError as error:
                if error.model is None:
                    error.model = op.model  # (a transport's error: the closed client's)
                if sequence_request:
                    mark_outcome(op, error)  # (before a hook's own exception can hide it)
                run_on_error(hooks, op, ctx, error)
                raise
            if sequence_request:
                mark_outcome(op, None)
            run_after_receive(hooks, op, ctx, result)
            return result
        finally:
            end_attempt(hooks, op, ctx)

    def _run(self, op: Op[T], options: CallOptions) -> T:
        """Send ``op``, retried under the call's policy when it is idempotent.

        The first attempt runs without retry machinery; tenacity takes over only after a
        retryable failure, replaying it as attempt 1.
        """
        if self._closed:
            raise closed_error("Client")
        policy = options.retry
        bucket = self._retry_bucket
        if bucket is not None:
            bucket.calls += 1
        try:
            if self._settings.hooks:
                return self._send(op, options.context(op))
            ctx = options.context(op)
            if SENDING.get() is not None:
                mark_reached(op)
            try:
                return self._transport.call(op, ctx)  # (_send, inlined)
            except TritonError as error:
                if error.model is None:
                    error.model = op.model
                raise
            except self._malformed as exc:
                raise unreadable_answer(exc, op.call, op.model) from exc
        except UnsupportedError as error:
            if not names_no_server(error):
                raise
            raise unsupported_operation(error, op.call, self._url) from error
        except TritonError as error:
            if policy.max_attempts <= 1 or not should_retry(error, idempotent=op.idempotent):
                raise
            failures = [error]
            note_resend(op, error)
        attempts = 1

        last = failures[0]
        ran = last.may_have_run  # (by any attempt: the last one may not have gone out)

        def again() -> T:
            nonlocal attempts, last, ran
            if failures:
                raise failures.pop()
            attempts += 1
            if self._closing or self._closed:
                raise closed_while_retrying(what, last, ran) from last
            try:
                ctx: CallContext | None = options.context(op, attempts)
            except TritonTimeoutError:
                ctx = None
            if ctx is None:
                # The backoff overslept the deadline: the call ends on its last failure.
                stop.hit_deadline = True
                raise last
            try:
                return self._send(op, ctx)
            except TritonError as error:
                last = error
                ran = ran or error.may_have_run
                note_resend(op, error)
                raise

        stop = StopAt(policy, options.deadline_at, self._retry_bucket)
        what = op.call if op.model is None else f"{op.call} {op.model!r}"
        try:
            return Retrying(
                sleep=self._backoff, **retrying_kwargs(policy, stop, what, op.idempotent)
            )(again)
        except TritonError as error:
            final = final_error(error, stop, what, policy)
            final.may_have_run = final.may_have_run or ran
            if final is error:
                raise
            raise final from error

    def _wait_for_start(self, started: Gate, until: float | None, model: str) -> None:
        """Wait for a sequence's START request to go out, as its other requests do: cut
        short by closing the client, and by the call's timeout (``until``)."""
        while True:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                raise start_wait_timed_out(model)
            if started.wait(_POLL_INTERVAL if left is None else min(_POLL_INTERVAL, left)):
                return
            if self._closing or self._closed:
                error = closed_error("Client")
                error.model = model
                raise error

    def _backoff(self, seconds: float) -> None:
        """The wait between two attempts; closing the client cuts it short."""
        wait_until(lambda: self._closing or self._closed, seconds, _POLL_INTERVAL)

    def _stream(self, op: StreamOp[T], options: CallOptions) -> ResponseStream[T]:
        """The responses of a streamed op; never retried."""
        if self._closed:
            raise closed_error("Client")
        # Streams are never retried: the retry deadline does not cut their waits.
        ctx = attrs.evolve(options, deadline_at=None).context(op)
        ctx._stop = stop = StreamStop()
        return ResponseStream(self._responses(op, ctx), stop)

    def _responses(self, op: StreamOp[T], ctx: CallContext) -> Iterator[T]:
        hooks = self._settings.hooks
        ctx.url = op.url if isinstance(op, OpenAIEvents) else self._url
        try:
            run_before_send(hooks, op, ctx)
            responses = self._transport.stream(op, ctx)
            try:
                while True:
                    # Only reading the answer is guarded: a hook's own KeyError is its own.
                    try:
                        item = next(responses)
                    except StopIteration:
                        break
                    except TritonError:
                        raise
                    except self._malformed as exc:
                        raise unreadable_answer(exc, op.call, op.model) from exc
                    if hooks:
                        run_after_receive(hooks, op, ctx, item)
                    yield item
            except TritonError as error:
                if ctx._stop is not None and ctx._stop.requested:
                    return  # stopped from another thread: the reader's loop just ends
                if error.model is None:
                    error.model = op.model
                run_on_error(hooks, op, ctx, error)
                if names_no_server(error):
                    raise unsupported_operation(error, op.call, self._url) from error
                raise
            finally:
                # Closing the transport's stream cancels the request on the server.
                close_iterator(responses)
        finally:
            end_attempt(hooks, op, ctx)

    # Health and server

    def _healthy(self, op: Op[bool], options: CallOptions) -> bool:
        try:
            return self._run(op, options)
        except InvalidInputError:
            raise  # the caller's mistake (a hook's bad header), not the server's state
        except TritonError:
            return False

    def is_live(self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None) -> bool:
        """Whether the server answers as live; False (never an error) when unreachable."""
        return self._healthy(IsServerLive(), self._options(timeout, headers))

    def is_ready(self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None) -> bool:
        """Whether the server is ready for inference; False when unreachable."""
        return self._healthy(IsServerReady(), self._options(timeout, headers))

    def is_model_ready(
        self,
        name: str,
        version: str | None = None,
        *,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> bool:
        """Whether a model (a given version, or the one the server's policy picks) is ready."""
        return self._healthy(IsModelReady(name, version), self._options(timeout, headers))

    def wait_until_ready(
        self, timeout: float | None = 60.0, *, model: str | None = None, headers: Headers = None
    ) -> None:
        """Poll until the server (and ``model``, if given) is ready.

        Raises TritonTimeoutError when ``timeout`` seconds pass first (``None``: wait
        for as long as it takes).
        """
        limit = check_timeout(timeout)
        deadline = time.monotonic() + (float("inf") if limit is None else limit)
        probes: list[Op[bool]] = [IsServerReady()]
        if model is not None:
            probes.append(IsModelReady(model))
        earlier: tuple[TritonError | None, bool] | None = None  # (the last round's outcome)
        while True:
            probe_timeout = max(min(deadline - time.monotonic(), 1.0), 0.01)
            each = self._options(probe_timeout, headers, _ONCE)
            failure: TritonError | None = None
            server_ready = False  # (the first probe is the server's)
            for probe in probes:
                try:
                    ready = self._run(probe, each)
                except TritonError as error:
                    if not heals_by_waiting(error):
                        raise
                    ready, failure = False, error
                if not ready:
                    break
                server_ready = True
            else:
                return
            left = deadline - time.monotonic()
            timed_out = isinstance(failure, TritonTimeoutError) or (
                isinstance(failure, TritonConnectionError) and "could not connect" in str(failure)
            )
            cut_short = timed_out and probe_timeout < 1.0
            if left <= 0 and cut_short and earlier is not None:
                # The last probe had what was left of the wait (down to 0.01 s): its timeout
                # says nothing of the server; the round before says why it was not ready.
                failure, server_ready = earlier
            earlier = failure, server_ready
            if left <= 0:
                what = "the server" if model is None else f"model {model!r}"
                if failure is None and model is not None:
                    # (Triton is not ready as a whole while a model loads or unloads.)
                    last = self._model_state(model, headers, server_ready=server_ready)
                else:
                    last = "" if failure is None else f" (last: {failure})"
                raise TritonTimeoutError(
                    f"{what} at {self._where()} was not ready after {timeout}s{last}",
                    model=model,
                ) from failure
            sleep(min(_POLL_INTERVAL, left))  # (the last probe is at the deadline)

    def _model_state(self, model: str, headers: Headers, *, server_ready: bool) -> str:
        """Why a model is not ready, as the repository index says (its state and the
        reason: LOADING, UNAVAILABLE after a failed load), for a message. One more call,
        of at most 1 s, after the wait's timeout."""
        options = self._options(1.0, headers, _ONCE)
        try:
            entries = self._run(ListModels(), options)
            index = self._read_each(ModelStatus.from_json, entries, "models")
        except UnsupportedError:
            # No repository index (KServe): its metadata says at least whether it exists.
            try:
                self._run(GetModelMetadata(model), options)
            except ModelNotFoundError as error:
                return f" (last: {error})"
            except TritonError as error:
                return f" (its state could not be read: {error})"
            return " (the server has it, but says it is not ready)"
        except TritonError as error:
            return f" (its state could not be read: {error})"
        return f" (last: {not_ready_because(index, model, server_ready=server_ready)})"

    def _where(self) -> str:
        """The server's URL, or each of the client's endpoints (or its DNS name)."""
        settings = self._settings
        if settings.dns is not None:
            return f"any address of {settings.dns}"
        if len(settings.endpoints) > 1:
            return "any of " + ", ".join(str(endpoint) for endpoint in settings.endpoints)
        return self.url

    def _read(
        self,
        parse: Callable[[Mapping[str, Any]], T],
        data: Any,
        what: str,
        model: str | None = None,
    ) -> T:
        """``parse`` of a JSON object the server answered; InferenceError when it is none
        or lacks what ``parse`` needs (a proxy's answer, say), never a raw exception."""
        try:
            if not isinstance(data, Mapping):
                raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
            refuse_error_body(data, what, model)
            return parse(data)
        except self._malformed as exc:
            raise unreadable_answer(exc, what, model) from exc

    def _read_each(
        self,
        parse: Callable[[Mapping[str, Any]], T],
        data: Any,
        what: str,
        model: str | None = None,
    ) -> list[T]:
        """:meth:`_read` of each entry of a JSON array the server answered."""
        try:
            if not isinstance(data, list | tuple):
                refuse_error_body(data, what, model)
                raise TypeError(f"a JSON array was expected, not {type(data).__name__}")
        except self._malformed as exc:
            raise unreadable_answer(exc, what, model) from exc
        return [self._read(parse, entry, what, model) for entry in data]

    def server_metadata(
        self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None
    ) -> ServerMetadata:
        """The server's name, version and protocol extensions."""
        data = self._run(GetServerMetadata(), self._options(timeout, headers))
        return self._read(ServerMetadata.from_json, data, "server_metadata")

    # Model repository

    def models(self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None) -> list[ModelStatus]:
        """Every model in the repository, with its version and state."""
        entries = self._run(ListModels(), self._options(timeout, headers))
        return self._read_each(ModelStatus.from_json, entries, "models")

    def load_model(
        self,
        name: str,
        config: Mapping[str, object] | str | None = None,
        *,
        files: Mapping[str, bytes] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> None:
        """Load (or reload) a model; needs ``--model-control-mode=explicit`` on the server.

        ``config`` overrides the model's config.pbtxt (a mapping in the JSON form of the
        config, or its JSON text); ``files`` maps ``"file:<path in model dir>"`` to bytes.
        Not retried: a load with an override really reloads the model.
        """
        op = LoadModel(name, config_json(config), files)
        options = self._options(timeout, headers)
        try:
            self._run(op, options)
        except (ModelNotFoundError, InferenceError) as error:
            self._refuse_kserve_repository(error, "load_model", options)
            raise

    def unload_model(
        self,
        name: str,
        *,
        unload_dependents: bool = False,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> None:
        """Unload a model; needs ``--model-control-mode=explicit`` on the server."""
        options = self._options(timeout, headers)
        try:
            self._run(UnloadModel(name, unload_dependents), options)
        except (ModelNotFoundError, InferenceError) as error:
            self._refuse_kserve_repository(error, "unload_model", options)
            raise

    def _refuse_kserve_repository(
        self, error: TritonError, call: str, options: CallOptions
    ) -> None:
        """After a failed load or unload over gRPC: KServe's repository RPCs read another
        request than Triton's (the model's name is lost), which its errors do not say."""
        # (KServe answers NOT_FOUND for the nameless model, or fails with UNKNOWN)
        if self._settings.endpoint.protocol != "grpc" or error.status not in _KSERVE_LOSS:
            return
        try:
            metadata = self._run(GetServerMetadata(), attrs.evolve(options, retry=_ONCE))
        except TritonError:
            return  # (the error of the call itself says more)
        if metadata.get("name") == "kserve":
            raise UnsupportedError(
                f"{call}: KServe's gRPC endpoint reads another request than Triton's, and "
                f"loses the model's name ({error}); use the server's HTTP URL",
                model=error.model,
            ) from error

    # Statistics, metrics, trace and log settings

    def model_statistics(
        self,
        name: str | None = None,
        version: str | None = None,
        *,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> list[ModelStatistics]:
        """The server's statistics of one model (a version, or all its versions) or of all.

        Counts and cumulative durations since each model version was loaded.
        """
        op = GetModelStatistics(name, version)
        entries = self._run(op, self._options(timeout, headers))
        return self._read_each(ModelStatistics.from_json, entries, op.call, name)

    def metrics(
        self, url: str | None = None, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None
    ) -> ServerMetrics:
        """The server's Prometheus metrics, parsed: per-model figures and server gauges.

        Read from ``url``, else the client's ``metrics_url`` (the server's metrics port,
        8002 by default), with the client's headers and TLS files.
        """
        op = FetchMetrics(url or self._settings.metrics_url)
        try:
            text = self._run(op, self._options(timeout, headers))
        except UnsupportedError as error:  # (the error names the client's URL, not this one)
            answer = "an empty page" if error.status == 200 else error.status
            raise UnsupportedError(
                f"no metrics at {redact_url(metrics_url_read(op.url))} ({answer}); Triton "
                "serves them on its metrics port (8002 by default), path /metrics",
                status=error.status,
            ) from error
        return ServerMetrics.from_text(text)

    def trace_settings(
        self, model: str | None = None, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None
    ) -> TraceSettings:
        """The server's trace settings, or one model's (needs the trace extension)."""
        data = self._run(GetTraceSettings(model), self._options(timeout, headers))
        return self._read(TraceSettings.from_json, data, "trace_settings", model)

    def update_trace_settings(
        self,
        model: str | None = None,
        *,
        level: Iterable[str] | None = None,
        rate: int | None = None,
        count: int | None = None,
        log_frequency: int | None = None,
        clear: Iterable[str] | str = (),
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> TraceSettings:
        """Change trace settings (server-wide, or for one model); returns the new ones.

        ``clear`` names settings (``"level"``, ``"rate"``, ``"count"``,
        ``"log_frequency"``) to undo: a model's then follows the server-wide one, a
        server-wide one returns to the value the server started with. The server takes
        the trace file only at start (``--trace-config triton,file=PATH``); turning
        tracing on (``level``) needs one.
        """
        updates = trace_updates(
            level=level, rate=rate, count=count, log_frequency=log_frequency, clear=clear
        )
        op = UpdateTraceSettings(model, updates)
        data = self._run(op, self._options(timeout, headers))
        return self._read(TraceSettings.from_json, data, "update_trace_settings", model)

    def log_settings(self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None) -> LogSettings:
        """The server's log settings (needs the logging extension)."""
        data = self._run(GetLogSettings(), self._options(timeout, headers))
        return self._read(LogSettings.from_json, data, "log_settings")

    def update_log_settings(
        self,
        *,
        file: str | None = None,
        info: bool | None = None,
        warning: bool | None = None,
        error: bool | None = None,
        verbose_level: int | None = None,
        format: str | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> LogSettings:
        """Change the server's log settings; returns the new ones."""
        updates = log_updates(
            file=file,
            info=info,
            warning=warning,
            error=error,
            verbose_level=verbose_level,
            format=format,
        )
        data = self._run(UpdateLogSettings(updates), self._options(timeout, headers))
        return self._read(LogSettings.from_json, data, "update_log_settings")

    def system_shared_memory_status(
        self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None
    ) -> list[SharedMemoryRegion]:
        """The system shared memory regions registered with the server (by any client)."""
        entries = self._run(GetSystemSharedMemoryStatus(), self._options(timeout, headers))
        return self._read_each(SharedMemoryRegion.from_json, entries, "shared memory status")

    def cuda_shared_memory_status(
        self, *, timeout: Timeout = NOT_GIVEN, headers: Headers = None
    ) -> list[CudaSharedMemoryRegion]:
        """The CUDA shared memory regions registered with the server (by any client)."""
        entries = self._run(GetCudaSharedMemoryStatus(), self._options(timeout, headers))
        return self._read_each(CudaSharedMemoryRegion.from_json, entries, "shared memory status")

    # Model handles

    def model_config(
        self,
        name: str,
        version: str | None = None,
        *,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> JSON:
        """A model's configuration as the server reports it (the JSON form of config.pbtxt;
        over gRPC, fields left at their default are left out)."""
        return self._run(GetModelConfig(name, version), self._options(timeout, headers))

    def model_spec(
        self,
        name: str,
        version: str | None = None,
        *,
        max_batch_size: int | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> ModelSpec:
        """The typed description of a model, read from its metadata and config.

        A server without a config endpoint (MLServer, KServe) gives a spec from the
        metadata alone (``spec.source == "metadata"``), which the client remembers.
        ``max_batch_size`` says whether and how far the model batches when the server
        cannot (0: no batch axis).
        """
        options = self._options(timeout, headers)  # one retry deadline for both reads
        with same_endpoint() as used:  # (of many, the reads must not mix two replicas)
            for _ in range(_SPEC_READS):
                metadata, config, moved = self._spec_reads(name, version, options, used)
                if not moved:
                    break
                del used[:-1]  # the config's read moved: read both where it went
        try:
            return ModelSpec.from_metadata(metadata, config, max_batch_size=max_batch_size)
        except TritonError:  # (InvalidInputError is a ValueError: a max_batch_size= mistake)
            raise
        except MALFORMED_ANSWER as exc:
            raise unreadable_answer(exc, "model_metadata and model_config", name) from exc

    def _spec_reads(
        self, name: str, version: str | None, options: CallOptions, used: list[object]
    ) -> tuple[JSON, JSON | None, bool]:
        """A model's metadata and (where the server has them) its config, and whether
        the config's read went to another endpoint than the metadata's (``used``: the
        endpoints of :func:`same_endpoint`)."""
        try:
            metadata = self._run(GetModelMetadata(name, version), options)
        except ModelNotFoundError as error:
            # The suggestions replace the error; the transport's failure stays its cause.
            raise self._not_found(error, name, options) from error.__cause__
        endpoints = len(used)
        config: JSON | None = None
        if self._has_config:
            try:
                config = self._run(GetModelConfig(name, version), options)
            except UnsupportedError as error:
                # The model exists (its metadata came): the server has no config endpoint.
                if error.status is None:
                    raise
                self._has_config = False
        return metadata, config, len(used) > endpoints

    def _not_found(
        self, error: ModelNotFoundError, name: str, options: CallOptions
    ) -> ModelNotFoundError:
        """``error``, naming the models the repository has, the closest first (or as it
        was, when the repository cannot be listed)."""
        try:
            entries = self._run(ListModels(), attrs.evolve(options, retry=_ONCE))
        except TritonError:
            return error
        known = sorted({str(entry.get("name", "")) for entry in entries} - {""})
        return ModelNotFoundError(
            with_suggestions(str(error), name, known),
            status=error.status,
            model=error.model,
            request_id=error.request_id,
        )

    def model(
        self,
        name: str,
        version: str | None = None,
        *,
        max_batch_size: int | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
    ) -> Model:
        """A typed handle on a model; reads its metadata and config once.

        ``max_batch_size`` overrides the batch axis the spec would have (0: none), for a
        model on a server without a config endpoint whose metadata is ambiguous.
        Raises ModelNotFoundError when the server has no such model (or version).
        """
        spec = self.model_spec(
            name, version, max_batch_size=max_batch_size, timeout=timeout, headers=headers
        )
        return Model(self, spec, version)

    def _infer(
        self,
        requests: list[InferRequest],
        plan: PlacementPlan,
        options: CallOptions,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
    ) -> InferResult:
        """The requests of one call (the chunks of a split batch), joined in order."""
        mode = self._shared_memory_mode(shared_memory)
        if len(requests) == 1:
            if on_sockets(plan, mode, self._server_reads_our_memory):
                return self._run(requests[0], options)  # (_infer_one, inlined)
            return self._infer_one(requests[0], plan, options, mode)

        rows = [len(request.inputs[0].array) for request in requests]
        firsts = itertools.accumulate([0, *rows])  # (one more than there are requests)
        spans = {  # (each request's first row and row count)
            id(request): (first, count)
            for request, first, count in zip(requests, firsts, rows, strict=False)
        }

        def chunk(request: InferRequest) -> InferResult:
            first, count = spans[id(request)]
            try:
                result = self._infer_one(request, plan, options, mode)
                result._check_rows(count)  # (here, so that its error names the rows)
                return result
            except TritonError as error:
                in_split_batch(error, first, count, rows)
                raise

        # (each answer's rows were checked by its chunk)
        return InferResult.concatenate(self._chunks.run(chunk, requests))

    def _shared_memory_mode(self, shared_memory: SharedMemory | NotGiven) -> SharedMemory:
        """The mode of a call: its own, checked, or the client's."""
        mode = self._shared_memory if shared_memory is NOT_GIVEN else check_mode(shared_memory)
        if self._sockets_only and mode not in _SOCKETS_ONLY_MODES:
            raise InvalidInputError(self._sockets_only)
        return mode

    def _infer_one(
        self,
        request: InferRequest,
        plan: PlacementPlan,
        options: CallOptions,
        mode: SharedMemory,
        placed_before: bool = False,
    ) -> InferResult:
        """One request; its large tensors (every one in "system" and "cuda" modes) through
        shared memory when the mode allows. ``placed_before``: a first placement of it
        named regions the server had lost."""
        if on_sockets(plan, mode, self._server_reads_our_memory):
            return self._run(request, options)
        if self._closing:  # (its regions would be made after close drained the pool)
            raise closed_error("Client")
        pool = self._regions if mode in _SYSTEM else self._cuda_pool(mode)
        forced = mode != "auto"
        try:
            # A call that must not run twice keeps outputs of open size on the socket.
            placed = place(
                request,
                plan,
                pool,
                self._output_views,
                estimated=options.retry.max_attempts > 1,
                forced=forced,
            )
        except NoRoomForRegion as error:
            if mode != "auto":
                raise
            logger.info("%s; this call's tensors go over the socket", error)
            placed = None
        if placed is None:
            result = self._run(request, options)
        else:
            result = self._infer_placed(request, *placed, plan, pool, options, mode, placed_before)
        if plan.open_outputs:
            plan.learn(request, result, forced=forced)
        return result

    def _cuda_pool(self, mode: SharedMemory) -> RegionPool:
        device = cuda_device(mode) or 0
        pool = self._cuda_regions.get(device)
        if pool is None:  # (two threads may get here: setdefault keeps one pool)
            pool = self._cuda_regions.setdefault(device, RegionPool(device))
        return pool

    def _infer_placed(
        self,
        request: InferRequest,
        shm_request: InferRequest,
        placement: Placement,
        plan: PlacementPlan,
        pool: RegionPool,
        options: CallOptions,
        mode: SharedMemory,
        placed_before: bool,
    ) -> InferResult:
        """``shm_request`` (``request`` with regions), or ``request`` when the regions
        cannot be registered in "auto" mode."""
        # True while the server may be running shm_request without this call knowing how
        # it ended: it may then write into the regions at any time.
        abandoned = False
        try:
            if not self._register(placement.regions, pool, mode, options):
                return self._run(request, options)
            abandoned = True
            result = self._run(shm_request, options)
            abandoned = placement.resent
            return result
        except TritonError as error:
            abandoned = abandoned and may_still_run(error, placement)
            if regions_lost(error, placement) and not placed_before:
                lost = error
            elif isinstance(error, InferenceError) and plan.outgrown(error, request, placement):
                lost = None
                logger.info("%s; the request runs again with its outputs on the socket", error)
            else:
                raise
        finally:
            pool.release(placement, abandoned=abandoned)
        if lost is not None:
            # Refused before it ran: it runs again in regions registered anew.
            self._forget_lost_regions(pool, lost, options)
            return self._infer_one(request, plan, options, mode, placed_before=True)
        # The model ran, but its answer outgrew a region sized from earlier answers: it
        # runs again with the outputs on the socket.
        return self._run(request, options)

    def _free_surplus(self, pool: RegionPool, options: CallOptions) -> None:
        """Unregister and free the regions a burst of calls left (see RegionPool.surplus).

        As a registration does, it marks itself in flight before it looks at
        ``_closing``: either close waits for it (and then drains what it gave back), or it
        sees the client closing and takes nothing out of the pool."""
        trim = object()
        self._trimming.add(trim)
        try:
            if self._closing:
                return
            surplus = pool.surplus()
            for index, region in enumerate(surplus):
                try:
                    self._run(region.unregister_op(), options)
                except BaseException as error:  # (a cancellation too: none may be lost)
                    if isinstance(error, TritonError):
                        logger.info("shared memory %s is kept: %s", region.name, error)
                    # Registered still (or, cut off, perhaps not: a later call that
                    # finds it gone registers it anew): close unregisters them.
                    for kept in surplus[index:]:
                        pool.readmit(kept)
                    if not isinstance(error, TritonError):
                        raise
                    return
                region.close()
        finally:
            self._trimming.discard(trim)

    def _forget_lost_regions(
        self, pool: RegionPool, error: TritonError, options: CallOptions
    ) -> None:
        """Forget the registrations the server no longer has (see RegionPool.lost)."""
        logger.info("%s: the server lost this client's regions; they are registered anew", error)
        before = pool.registrations()
        try:
            status = self._run(pool.status_op(), attrs.evolve(options, retry=_ONCE))
        except TritonError as failure:
            raise failure from error
        pool.lost({str(entry.get("name")) for entry in status}, before)

    def _register(
        self, regions: list[AnyRegion], pool: RegionPool, mode: SharedMemory, options: CallOptions
    ) -> bool:
        """Register the regions the server does not know yet; False when it cannot read
        this host's memory and ``mode`` is "auto" (sockets, then, for good)."""
        once = attrs.evolve(options, retry=_ONCE)
        if pool.claim_sweep():
            try:
                self._forget_stale_regions(pool, once)
            finally:
                pool.sweep_over()
        self._free_abandoned(pool, once)
        self._free_cut(pool, once)
        self._free_surplus(pool, once)
        for region in regions:
            if region.registered:
                continue
            self._registering.add(region)  # (before the check: see _registrations_done)
            if self._closing:
                self._registering.discard(region)
                raise closed_error("Client")
            try:
                self._run(region.register_op(), once)
            except (InferenceError, UnsupportedError) as error:
                # Unsupported: a server without the extension (MLServer, KServe).
                if mode != "auto" or self._server_reads_our_memory:
                    memory = (
                        "this host's shared memory"
                        if pool.device is None
                        else f"this client's memory on GPU {pool.device} (a CUDA IPC handle)"
                    )
                    raise TritonError(
                        f"the server at {self.url} cannot use {memory} "
                        f"(shared_memory={mode!r}): {error}",
                        status=error.status,
                    ) from error
                self._server_reads_our_memory = False
                if next(self._unread_memory_said) == 0:
                    logger.info(
                        "the server at %s cannot read this host's shared memory; large "
                        "tensors go over the socket: %s",
                        self.url,
                        error,
                    )
                return False
            except BaseException:
                # Cut off (a timeout, a cancellation, a lost connection): the server may
                # have it. Never used again (a later call would send it to a server that
                # may not know it); unregistered and freed as abandoned regions are.
                pool.cut_off(region)
                raise
            finally:
                self._registering.discard(region)
                region.unlink()  # the server has it mapped now (or never will)
            pool.registered(region)
            if pool.device is None:
                self._server_reads_our_memory = True
        return True

    def _free_abandoned(self, pool: RegionPool, options: CallOptions, force: bool = False) -> None:
        """Free the regions of abandoned calls (see RegionPool.release) that the server
        no longer uses: unregistered, and absent from its list of regions."""
        calls = pool.due_for_check(force)
        if not calls:
            return
        try:
            if not self._guards_regions(options):
                # Unregistering a region under a running request could crash this server:
                # they stay registered, until the next client on this host finds this
                # process gone.
                return
            for regions in calls:
                for region in regions:
                    if not region.registered:
                        continue
                    try:
                        self._run(region.unregister_op(), options)
                    except InferenceError:
                        # "it is currently in use" (Triton 2.50-2.51), and so are the
                        # other regions of its call. From 2.52 the server accepts, and
                        # lets go of the region (listing it until then) once it is done.
                        break
                    region.registered = False
            unregistered = [r for regions in calls for r in regions if not r.registered]
            if not unregistered:
                return
            status = self._run(pool.status_op(), options)
        except TritonError as error:
            logger.info("regions of abandoned calls are kept for now: %s", error)
            return
        listed = {str(entry.get("name")) for entry in status}
        for region in unregistered:
            if region.name not in listed:
                pool.forget(region)

    def _free_cut(self, pool: RegionPool, options: CallOptions) -> None:
        """Unregister and free the regions whose registration was cut off (a timeout, a
        cancellation): no request ever used them, so any server may let them go. They
        piled up, memory and descriptors, until close."""
        for region in pool.cut_due():
            try:
                self._run(region.unregister_op(), options)
            except ModelNotFoundError:
                pass  # (the registration never arrived)
            except TritonError as error:
                logger.info("regions cut off while registering are kept for now: %s", error)
                return
            pool.forget_cut(region)

    def _guards_regions(self, options: CallOptions) -> bool:
        """Whether the server keeps (or lets go of only once done) a region a running
        request uses when asked to unregister it (see guards_regions_in_use)."""
        if self._server_guards_regions is None:
            metadata = self._run(GetServerMetadata(), options)
            self._server_guards_regions = guards_regions_in_use(metadata)
        return self._server_guards_regions

    def _forget_stale_regions(self, pool: RegionPool, options: CallOptions) -> None:
        """Unregister regions that processes of this host left behind when they died,
        and remove the files of those they died making."""
        if pool.device is None:
            remove_stale_files()
        try:
            status = self._run(pool.status_op(), options)
        except UnsupportedError:
            pool.swept(set())  # (no such endpoint: the registration that follows says so)
            return
        except TritonError as error:
            logger.info("regions of dead processes are looked for later: %s", error)
            pool.sweep_later()
            return
        kept = set()
        for name in stale_regions(status):
            try:
                self._run(pool.unregister_op(name), options)
            except ModelNotFoundError:
                pass  # (gone already)
            except InferenceError as refusal:
                # A request of the dead process still runs there (2.50-2.51 refuse to
                # unregister a region in use): asked again later.
                logger.info("shared memory %s is left for now: %s", name, refusal)
                kept.add(name)
        pool.swept(kept)

    # Lifetime

    def close(self, *, headers: Headers = None) -> None:
        """Close the connections. The client cannot be used afterwards.

        ``headers`` go with the calls that unregister the client's shared-memory regions.
        """
        if self._closed or self._closing:
            self._close_finished()  # (the close under way does the job)
            return
        options = self._settings.options(NOT_GIVEN, _ONCE, headers)  # (may refuse headers)
        # Connections of asyncio are closed in their own loop (blocking ones have none).
        refuse_another_loop(self._transport)
        self._closing = True
        # (Cut off by a timeout or a cancellation, it goes on: regions left registered
        # would stay so for the life of the process.)
        shielded(self._close, options)

    def _close(self, options: CallOptions) -> None:
        self._closer = current_worker()
        try:
            self._registrations_done()
            self._drain_regions(options)
        finally:
            self._closed = True
            try:
                self._transport.close()  # first: it ends the chunks in flight
            finally:
                self._chunks.close()
                self._close_done = True

    def _close_finished(self) -> None:
        """Wait for the close under way, begun elsewhere, to end (at most _CLOSE_WAIT): a
        second close returns once the regions are unregistered and the connections closed.
        Within the close itself (a hook of its calls), it returns at once."""
        if self._closer == current_worker():
            return
        if not wait_until(lambda: self._close_done, _CLOSE_WAIT):
            logger.warning("close: gave up waiting for the close under way after %ss", _CLOSE_WAIT)

    def _registrations_done(self) -> None:
        """Wait for the registrations in flight (a few milliseconds each; at most
        _REGISTRATIONS_WAIT in all), so that the regions they register are drained.

        A call adds its region to ``_registering`` before it looks at ``_closing``, and
        close sets ``_closing`` before it looks here: either close sees that region, or
        the call sees the client closing and registers nothing."""
        wait_until(lambda: not (self._registering or self._trimming), _REGISTRATIONS_WAIT)

    def _drain_regions(self, options: CallOptions) -> None:
        """Unregister and free the client's regions, but not memory the server may still
        write into (regions of abandoned calls, see RegionPool.release)."""
        pools = [self._regions, *self._cuda_regions.values()]
        for pool in pools:
            self._free_abandoned(pool, options, force=True)
        drained = [pool.drain() for pool in pools]
        in_use = {region for taken in drained for region in taken.abandoned}
        busy = {region for taken in drained for region in taken.busy}
        guarded = False
        if busy:
            with contextlib.suppress(TritonError):  # (then each is left, with a warning)
                guarded = self._guards_regions(options)
        for region in [region for taken in drained for region in taken.regions]:
            if region in in_use:
                logger.warning(
                    "the server may still use shared memory %s, for a request of a call "
                    "that ended without an answer; %s",
                    region.name,
                    "it is left registered"
                    if region.registered
                    else "the server lets go of it when that request is done",
                )
                # System memory: the server's own mapping keeps it. GPU memory stays
                # allocated until this process ends.
                if region.mapped:
                    region.close()
                continue
            if region in busy:  # a call in flight closes it when done
                if not region.registered:
                    continue
                if guarded:  # (2.52: once the request is done; 2.50-2.51 refuse, in use)
                    self._unregister(region, options)
                else:
                    logger.warning(
                        "shared memory %s is left registered: a call still uses it, and "
                        "this server may fail if it is unregistered under a request",
                        region.name,
                    )
                continue
            if region.registered:
                self._unregister(region, options)
            region.close()

    def _unregister(self, region: AnyRegion, options: CallOptions) -> None:
        for wait in (*_STILL_HELD_WAITS, None):
            try:
                self._run(region.unregister_op(), options)
                return
            except InferenceError as error:
                # Triton 2.50-2.51 hold a finished request's regions for some milliseconds
                # after its answer ("it is currently in use"): asked again, briefly.
                if wait is None or _IN_USE not in str(error):
                    failure: TritonError = error
                    break
                sleep(wait)
            except TritonError as error:
                failure = error
                break
        # The next client's first shared-memory call unregisters it (its process is gone
        # by then); closing goes on.
        logger.warning("could not unregister shared memory %s: %s", region.name, failure)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class Model(ModelCore):
    """A typed handle on one model of an :class:`Client`.

    Attributes:
        name: the model's name.
        version: the version asked for; ``None`` lets the server's version policy pick.
        spec: the model's inputs, outputs and scheduling, as a :class:`ModelSpec`.
    """

    __slots__ = ("_client",)

    def __init__(self, client: Client, spec: ModelSpec, version: str | None) -> None:
        super().__init__(spec, version)
        self._client = client

    def infer(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        priority: Priority = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven | None = NOT_GIVEN,
        headers: Headers = None,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue | None,
    ) -> InferResult:
        """Run a batch (or, for models without a batch axis, one request) through the model.

        Inputs are given by keyword or as one mapping, shaped and cast as the docs
        describe, and checked before anything is sent. A batch larger than
        ``max_batch_size`` is split into chunks, sent concurrently and joined in order.

        Args:
            outputs: the outputs to return; all of them when left out.
            timeout: seconds each attempt may take (``None``: no limit).
            parameters: request parameters for the model.
            priority: the request's priority, for models with priority levels.
            request_id: an id the server echoes in the result and in its errors.
            retry: this call's retry policy, instead of the client's (``None``: no retries).
            headers: sent on top of the client's headers.
            shared_memory: this call's ``"auto"``, ``"off"``, ``"system"`` or ``"cuda"``
                (``"cuda:<device>"``), instead of the client's.
        """
        requests = self._requests(
            inputs,
            named_inputs,
            outputs=outputs,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=False,
        )
        options = self._client._options(timeout, headers, retry)
        return self._client._infer(requests, self._placement, options, shared_memory)

    def infer_sample(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        priority: Priority = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven | None = NOT_GIVEN,
        headers: Headers = None,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue | None,
    ) -> InferResult:
        """Run one sample: inputs and outputs carry no batch axis.

        Each input is shaped like the model's sample shape; size-1 axes are added where
        that is the only way to match (a ``str`` fits ``dims: [1]``).
        """
        requests = self._requests(
            inputs,
            named_inputs,
            outputs=outputs,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=True,
        )
        options = self._client._options(timeout, headers, retry)
        result = self._client._infer(requests, self._placement, options, shared_memory)
        return result.without_batch_axis() if self.spec.batched else result

    def classify(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        top_k: int = 1,
        output: str | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        priority: Priority = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven | None = NOT_GIVEN,
        headers: Headers = None,
        **named_inputs: InputValue | None,
    ) -> list[list[Classification]]:
        """The ``top_k`` classes of each sample, best first, from the server's classification.

        Inputs are batched as in :meth:`infer`. ``output`` names the scores to classify
        (optional when the model has one output); labels come from the output's label
        file and are None without one.
        """
        name, top_k = self._classification_output(output, top_k)
        requests = self._requests(
            inputs,
            named_inputs,
            outputs=[name],
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=False,
            class_count=top_k,
        )
        self._refuse_classifying_nothing(requests, name)
        options = self._client._options(timeout, headers, retry)
        result = self._client._infer(requests, self._placement, options, "off")
        return parse_classifications(result[name], batched=self.spec.batched)

    def stream(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        request_id: str = "",
        headers: Headers = None,
        **named_inputs: InputValue | None,
    ) -> ResponseStream[InferResult]:
        """Send one request and iterate over the model's responses (decoupled models).

        Inputs are shaped as in :meth:`infer`. The iteration ends after the final
        response (no responses at all is an empty iteration); ``timeout`` bounds the wait
        for each response. Closing the stream early cancels the request. Streams are never
        retried (a client of many endpoints moves one whose endpoint ran nothing of it,
        before its first response). Over HTTP the request goes through the
        generate_stream extension, which carries one sample of scalar or 1-D inputs; gRPC
        streams anything. A server
        without model configs (MLServer) is streamed its own way, and the iteration ends
        when it closes the stream (see docs/servers.md).
        """
        check_not_inputs(self.spec, parameters)
        (request,) = self._requests(
            inputs,
            named_inputs,
            outputs=outputs,
            parameters=parameters,
            priority=0,
            request_id=request_id,
            sample=False,
            streaming=True,
        )
        if self.spec.has_config and self._client._checks_http_streams:
            # What the generate extension cannot carry is refused now, not at the first read.
            tensors_to_fields(list(request.inputs), self.spec)
        op = StreamInfer(request, self.spec)
        return self._client._stream(op, self._client._options(timeout, headers))

    def generate(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        retry: RetryPolicy | NotGiven | None = NOT_GIVEN,
        headers: Headers = None,
        **named_fields: object,
    ) -> dict[str, JSONValue]:
        """Run the model through the generate extension: JSON fields in, JSON fields out.

        Fields named like inputs are one sample of that input; other fields are request
        parameters. Returns the response's outputs (a one-element output as its plain
        value, BYTES as text). Works on gRPC too, through an inference or a stream, and
        on servers without model configs (MLServer, KServe), through an inference.
        """
        merged = merge_fields(self.spec, fields, named_fields)
        op = Generate(self.spec, self.version, merged, check_parameters(parameters, self.name))
        return self._client._run(op, self._client._options(timeout, headers, retry))

    def generate_stream(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        headers: Headers = None,
        **named_fields: object,
    ) -> ResponseStream[dict[str, JSONValue]]:
        """Like :meth:`generate`, yielding the fields of each response as it arrives.

        The fields are checked when it is called, as :meth:`stream`'s inputs are."""
        merged = merge_fields(self.spec, fields, named_fields)
        http = self._client._settings.endpoint.protocol == "http"
        plain = check_generate(self.spec, merged, parameters, http=http)
        op = GenerateStream(self.spec, self.version, merged, plain)
        return self._client._stream(op, self._client._options(timeout, headers))

    def chat(
        self,
        messages: Sequence[Message],
        *,
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        adapter: Adapter | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ChatCompletion:
        """Answer a conversation: the messages rendered by the chat template, generated
        by the model, returned as an OpenAI-shaped :class:`ChatCompletion`.

        Args:
            messages: OpenAI-style messages (``{"role": ..., "content": ...}``, tool calls
                included), handed to the template unchanged.
            chat_template: a Jinja chat template, or the path of a tokenizer_config.json
                or .jinja file; by default the ``chat_template`` parameter of the model's
                config. Without either, :class:`ChatTemplateError`.
            chat_template_kwargs: more variables for the template.
            tools: tool definitions for the template (OpenAI's JSON schema form).
            adapter: ``triton_sdk.llm.custom(...)`` for a text model of your own; by
                default the adapter is chosen from the model's inputs and outputs (vLLM,
                TensorRT-LLM, TensorRT-LLM LLM API).
            options: sampling options (``max_tokens``, ``temperature``, ``top_p``,
                ``stop``, ``n``, ``seed``, ...); one the model cannot take is refused
                before anything is sent, naming those it can.
        """
        call = self._chat_call(
            messages, chat_template, chat_template_kwargs, tools, adapter, options, False
        )
        return call.chat_completion(self._generated(call, timeout, headers))

    def chat_stream(
        self,
        messages: Sequence[Message],
        *,
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        adapter: Adapter | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ResponseStream[ChatCompletionChunk]:
        """Like :meth:`chat`, yielding :class:`ChatCompletionChunk` pieces as they come.

        The first chunk carries the role, each choice's finish reason comes on one chunk,
        and the last chunk carries the usage. Closing the stream early cancels the request
        on the server; an error the server sends mid-stream is raised there.
        """
        call = self._chat_call(
            messages, chat_template, chat_template_kwargs, tools, adapter, options, True
        )
        return self._chunks(call, call.chat_chunks(), timeout, headers)

    def complete(
        self,
        prompt: str,
        *,
        adapter: Adapter | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> Completion:
        """Continue a prompt, sent as it is: an OpenAI-shaped :class:`Completion` whose
        text never repeats the prompt. Options as in :meth:`chat`."""
        call = self._completion_call(prompt, adapter, options, False)
        return call.completion(self._generated(call, timeout, headers))

    def complete_stream(
        self,
        prompt: str,
        *,
        adapter: Adapter | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ResponseStream[CompletionChunk]:
        """Like :meth:`complete`, yielding :class:`CompletionChunk` pieces (the stream
        rules of :meth:`chat_stream`, without the role chunk)."""
        call = self._completion_call(prompt, adapter, options, True)
        return self._chunks(call, call.completion_chunks(), timeout, headers)

    def _generated(
        self, call: LLMCall, timeout: Timeout, headers: Headers
    ) -> list[dict[str, JSONValue]]:
        """Every response to a non-streaming call: a decoupled model may send several
        (TensorRT-LLM one per sequence, a model of the user's one per piece)."""
        if not self.spec.decoupled:
            # Never retried, as streams are: a generation is not idempotent.
            return [self.generate(call.fields, timeout=timeout, retry=None, headers=headers)]
        events: list[dict[str, JSONValue]] = []
        for event in self.generate_stream(call.fields, timeout=timeout, headers=headers):
            events.append(event)
        return events

    def _chunks(
        self, call: LLMCall, assembler: StreamAssembler[Chunk], timeout: Timeout, headers: Headers
    ) -> ResponseStream[Chunk]:
        events = self.generate_stream(call.fields, timeout=timeout, headers=headers)
        return ResponseStream(_assembled(events, assembler), events._stop)

    def sequence(self, sequence_id: int | str | None = None) -> ModelSequence:
        """A sequence of requests to a stateful model: ``with model.sequence() as seq:``.

        The id is allocated (a random int64, or a UUID string for models whose
        sequence ids are strings) unless given. The first request carries START, the
        one sent with ``end=True`` carries END. Requests of a sequence are never retried.
        """
        return ModelSequence(self, sequence_id)

    @overload
    def map(
        self,
        samples: Samples[Mapping[str, InputValue | None]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["raise"] = ...,
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven | None = ...,
        headers: Headers = ...,
        shared_memory: SharedMemory | NotGiven = ...,
    ) -> Generator[InferResult, None, None]: ...

    @overload
    def map(
        self,
        samples: Samples[Mapping[str, InputValue | None]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["collect"],
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven | None = ...,
        headers: Headers = ...,
        shared_memory: SharedMemory | NotGiven = ...,
    ) -> Generator[InferResult | TritonError, None, None]: ...

    def map(
        self,
        samples: Samples[Mapping[str, InputValue | None]],
        *,
        batch_size: int | None = None,
        concurrency: int = 4,
        progress: bool = False,
        errors: Literal["raise", "collect"] = "raise",
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        retry: RetryPolicy | NotGiven | None = NOT_GIVEN,
        headers: Headers = None,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
    ) -> Generator[InferResult, None, None] | Generator[InferResult | TritonError, None, None]:
        """Run many samples, batched, with ``concurrency`` batches in flight.

        Each sample is a mapping of input name to one sample (as for
        :meth:`infer_sample`); results come back one per sample, in input order, without
        a batch axis. ``batch_size`` defaults to the model's preferred (or maximum) batch
        size. Samples are read lazily, so endless iterables work in bounded memory. Each
        batch is retried under the retry policy. ``errors="collect"`` yields a
        :class:`TritonError` in place of each failed sample instead of raising; a batch
        the server refuses is then retried sample by sample to find the culprits.
        ``progress=True`` shows a tqdm progress bar.
        """
        check_samples(samples, Iterable)
        plan = MapPlan(self.spec, self.version, batch_size, concurrency, errors, outputs)
        runner = _MapRunner(self, plan, timeout, retry, headers, shared_memory)
        return runner.run(samples, progress)


def _assembled(
    events: ResponseStream[dict[str, JSONValue]], assembler: StreamAssembler[Chunk]
) -> Iterator[Chunk]:
    """The chunks of a chat or completion stream; closing them closes the request."""
    try:
        for event in events:
            for chunk in assembler.feed(event):
                yield chunk
        # Closed while being read (from another thread or task): the generation was cut,
        # so no finish reason or usage is inferred for it; the reader's loop just ends.
        cut = events._stop is not None and events._stop.requested
    finally:
        events.close()
    if cut:
        return
    for chunk in assembler.finish():
        yield chunk


class ModelSequence:
    """A sequence of requests to a stateful model; see :meth:`Model.sequence`.

    Leaving the ``with`` block without a request sent with ``end=True`` sends nothing
    more: it warns (:class:`SequenceNotEndedWarning`) that the server keeps the
    sequence's slot until it idles out.
    """

    __slots__ = ("_model", "_started", "_state")

    def __init__(self, model: Model, sequence_id: int | str | None = None) -> None:
        self._model = model
        self._state = SequenceState(model.spec, sequence_id, Gate)
        model._client._sequences.add(self._state)

    def __reduce__(self) -> NoReturn:
        # (copy.copy comes here too: a copy would share, and end, this one's sequence)
        raise TypeError(
            f"a sequence handle ({type(self).__name__}) cannot be pickled or copied: its "
            "state is on the server that holds the sequence; use this one"
        )

    @property
    def sequence_id(self) -> int | str:
        """The id every request of this sequence carries."""
        return self._state.sequence_id

    @property
    def ended(self) -> bool:
        """Whether the request marked ``end=True`` was sent (or is on its way: it may
        wait for the answer to the request carrying START)."""
        return self._state.ended

    def _send(
        self,
        inputs: Mapping[str, InputValue | None] | None,
        named: Mapping[str, InputValue | None],
        *,
        sample: bool,
        end: bool,
        outputs: Iterable[str] | None,
        timeout: Timeout,
        parameters: Mapping[str, ParameterInput] | None,
        priority: Priority,
        request_id: str,
        headers: Headers,
        shared_memory: SharedMemory | NotGiven,
    ) -> InferResult:
        model = self._model
        state = self._state
        state.check_open()
        end = check_end(end)
        (request,) = model._requests(
            inputs,
            named,
            outputs=outputs,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=sample,
            sequence=SequenceFlags(state.sequence_id, False, end),
        )
        options = model._client._options(timeout, headers, _ONCE)
        mode = model._client._shared_memory_mode(shared_memory)
        # Built and checked: now it is the sequence's next request. Claimed inside the
        # try, so that settling undoes what was counted whenever the request stops.
        delivery = Delivery()
        try:
            state.claim(delivery, end)
            # The server refuses a request of a sequence that reaches it before the one
            # carrying START: requests sent at once wait for that one to go out.
            waits_until = None if options.timeout is None else time.monotonic() + options.timeout
            waited = False
            while (started := state.ready(delivery)) is not None:
                model._client._wait_for_start(started, waits_until, model.name)
                waited = True
            if waited and waits_until is not None:  # (the wait counts in the timeout)
                left = waits_until - time.monotonic()
                if left <= 0:
                    raise start_wait_timed_out(model.name)
                options = attrs.evolve(options, timeout=left)
            if delivery.start:
                request = attrs.evolve(request, sequence_start=True)
            sending = SENDING.set(delivery)
            try:
                result = model._client._infer([request], model._placement, options, mode)
            finally:
                SENDING.reset(sending)
        except BaseException as error:
            state.settle(delivery, delivery.went_out(error))
            raise
        state.settle(delivery, True)
        return result.without_batch_axis() if sample and model.spec.batched else result

    def infer(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        end: bool = False,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        priority: Priority = 0,
        request_id: str = "",
        headers: Headers = None,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue | None,
    ) -> InferResult:
        """Send the next request of the sequence (batched inputs, as :meth:`Model.infer`)."""
        return self._send(
            inputs,
            named_inputs,
            sample=False,
            end=end,
            outputs=outputs,
            timeout=timeout,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            headers=headers,
            shared_memory=shared_memory,
        )

    def infer_sample(
        self,
        inputs: Mapping[str, InputValue | None] | None = None,
        /,
        *,
        end: bool = False,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterInput] | None = None,
        priority: Priority = 0,
        request_id: str = "",
        headers: Headers = None,
        shared_memory: SharedMemory | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue | None,
    ) -> InferResult:
        """Send the next request as one sample (as :meth:`Model.infer_sample`)."""
        return self._send(
            inputs,
            named_inputs,
            sample=True,
            end=end,
            outputs=outputs,
            timeout=timeout,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            headers=headers,
            shared_memory=shared_memory,
        )

    def __enter__(self) -> ModelSequence:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._state.leave()


class _MapRunner:
    """The driver of :meth:`Model.map`: a window of batches in flight."""

    def __init__(
        self,
        model: Model,
        plan: MapPlan,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven | None,
        headers: Headers,
        shared_memory: SharedMemory | NotGiven,
    ) -> None:
        self.model = model
        self.plan = plan
        self.timeout = timeout
        self.retry = retry
        self.headers = headers
        self.shared_memory = shared_memory
        model._client._options(timeout, headers, retry)  # refuses bad options at once
        # (else each batch would refuse it: one error per sample in collect mode)
        model._client._shared_memory_mode(shared_memory)

    def _run_batch(self, samples: list[PreparedSample]) -> list[Outcome]:
        if samples[0].error is not None:
            return [samples[0].error]
        plan = self.plan
        client = self.model._client
        # Each batch's retry deadline starts when it is sent. Options that cannot be used
        # (a closed client) end the whole map, not one sample.
        options = client._options(self.timeout, self.headers, self.retry)
        try:
            request = plan.request(samples)
            result = client._infer([request], self.model._placement, options, self.shared_memory)
            # (inside: an answer that cannot be split into rows fails this batch only)
            return plan.outcomes(samples, result)
        except TritonError as error:
            if plan.isolate(samples, error):
                outcomes: list[Outcome] = []
                for sample in samples:
                    outcomes += self._run_batch([sample])
                    if not plan.collect and isinstance(outcomes[-1], TritonError):
                        break  # (it ends the map: nothing after it is sent)
                return outcomes
            return [plan.batch_error(samples, error)] * len(samples)

    def run(
        self, samples: Samples[Mapping[str, InputValue | None]], progress: bool
    ) -> Generator[Outcome, None, None]:
        plan = self.plan
        bar = progress_bar(samples) if progress else None
        window = Window(plan.concurrency)

        def finish_oldest() -> list[Outcome]:
            outcomes: list[Outcome] = window.oldest()
            if bar is not None:
                bar.update(len(outcomes))
            return outcomes

        try:
            with window:
                remaining = iterate(samples)
                refused: TritonError | None = None
                while refused is None:
                    try:
                        sample = next(remaining)
                    except StopIteration:
                        break
                    except Exception:
                        # The samples' iterable failed: the batches sent before it come
                        # out first, in order, as they would before a refused sample.
                        while len(window):
                            for outcome in finish_oldest():
                                yield plan.emit(outcome)
                        raise
                    for batch in plan.builder.add(sample):
                        refused = plan.refusal(batch)
                        if refused is not None:
                            break  # nothing after a refused sample is sent
                        window.submit(self._run_batch, batch)
                        while len(window) >= plan.concurrency:
                            for outcome in finish_oldest():
                                yield plan.emit(outcome)
                    # Finished batches come out at once (in order), not only when the
                    # window is full: a slow source must not hold back their results.
                    while window.oldest_done():
                        for outcome in finish_oldest():
                            yield plan.emit(outcome)
                if refused is None:
                    for batch in plan.builder.flush():
                        window.submit(self._run_batch, batch)
                while len(window):
                    for outcome in finish_oldest():
                        yield plan.emit(outcome)
                if refused is not None:
                    yield plan.emit(refused)  # (raises)
        finally:
            if bar is not None:
                bar.close()


class Chat:
    """``client.chat``: holds :attr:`completions`, as OpenAI's client does."""

    __slots__ = ("completions",)

    def __init__(self, client: Client) -> None:
        self.completions: ChatCompletions = ChatCompletions(client)


class ChatCompletions:
    """``client.chat.completions.create(...)``: OpenAI's call, over Triton's own endpoints
    or its OpenAI-compatible frontend (see the client's ``route``), with the same return
    types and errors either way."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    @overload
    def create(
        self,
        *,
        model: str,
        messages: Sequence[Message],
        stream: Literal[False] = False,
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        route: Route | None = None,
        stream_options: None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ChatCompletion: ...

    @overload
    def create(
        self,
        *,
        model: str,
        messages: Sequence[Message],
        stream: Literal[True],
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ResponseStream[ChatCompletionChunk]: ...

    @overload
    def create(
        self,
        *,
        model: str,
        messages: Sequence[Message],
        stream: bool,
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ChatCompletion | ResponseStream[ChatCompletionChunk]: ...

    def create(
        self,
        *,
        model: str,
        messages: Sequence[Message],
        stream: bool = False,
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ChatCompletion | ResponseStream[ChatCompletionChunk]:
        """A chat completion (``stream=True``: its chunks); arguments as in
        :meth:`Model.chat`, ``route`` overriding the client's for this call. A
        stream ends with a chunk of the usage unless ``stream_options`` is
        ``{"include_usage": False}``."""
        client = self._client
        usage = include_usage(stream_options, stream, model)
        # A chat template is the native route's own: "auto" keeps such a call there.
        templated = chat_template is not None or chat_template_kwargs is not None
        tooled = None if templated else tools
        path = "chat/completions"
        target = client._openai_target(route, tooled, timeout, headers, path)
        if target is not None:
            if templated:
                raise UnsupportedError(
                    "the OpenAI-compatible frontend renders with the template of the "
                    "tokenizer it serves: chat_template applies to the native route"
                )
            url, options_ = target
            plain = plain_options(options, model)
            body = chat_body(model, messages, plain, stream=stream, tools=tools, usage=usage)
            if stream:
                events = client._stream(OpenAIEvents(url, body, model), options_)
                return _opened(events, reader(ChatCompletionChunk.from_openai_dict, path, model))
            answer = client._run(OpenAIPost(url, body, model), options_)
            return reader(ChatCompletion.from_openai_dict, path, model)(answer)
        handle = client._llm_model(model, timeout, headers)
        call = handle._chat_call(
            messages, chat_template, chat_template_kwargs, tools, None, options, stream
        )
        if stream:
            return handle._chunks(call, call.chat_chunks(usage=usage), timeout, headers)
        return call.chat_completion(handle._generated(call, timeout, headers))


class Completions:
    """``client.completions.create(...)``: OpenAI's legacy completions call, routed as
    :class:`ChatCompletions` is (a completion has no tools: ``"auto"`` is native)."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    @overload
    def create(
        self,
        *,
        model: str,
        prompt: str,
        stream: Literal[False] = False,
        route: Route | None = None,
        stream_options: None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> Completion: ...

    @overload
    def create(
        self,
        *,
        model: str,
        prompt: str,
        stream: Literal[True],
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> ResponseStream[CompletionChunk]: ...

    @overload
    def create(
        self,
        *,
        model: str,
        prompt: str,
        stream: bool,
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> Completion | ResponseStream[CompletionChunk]: ...

    def create(
        self,
        *,
        model: str,
        prompt: str,
        stream: bool = False,
        route: Route | None = None,
        stream_options: Mapping[str, object] | None = None,
        timeout: Timeout = NOT_GIVEN,
        headers: Headers = None,
        **options: SamplingValue,
    ) -> Completion | ResponseStream[CompletionChunk]:
        """A completion of ``prompt`` (``stream=True``: its chunks; ``stream_options`` as
        in :meth:`ChatCompletions.create`)."""
        client = self._client
        usage = include_usage(stream_options, stream, model)
        path = "completions"
        target = client._openai_target(route, None, timeout, headers, path)
        if target is not None:
            url, options_ = target
            plain = plain_options(options, model)
            body = completion_body(model, prompt, plain, stream=stream, usage=usage)
            if stream:
                events = client._stream(OpenAIEvents(url, body, model), options_)
                return _opened(events, reader(CompletionChunk.from_openai_dict, path, model))
            answer = client._run(OpenAIPost(url, body, model), options_)
            return reader(Completion.from_openai_dict, path, model)(answer)
        handle = client._llm_model(model, timeout, headers)
        call = handle._completion_call(prompt, None, options, stream)
        if stream:
            return handle._chunks(call, call.completion_chunks(usage=usage), timeout, headers)
        return call.completion(handle._generated(call, timeout, headers))


def _opened(events: ResponseStream[JSON], parse: Callable[[JSON], Chunk]) -> ResponseStream[Chunk]:
    """The frontend's events as chunks, sent now: as with openai's client, ``create``
    raises what the frontend answers before its stream starts (a refusal, an unknown
    model). It returns once the first event has come."""
    try:
        first: JSON | None = next(events)
    except StopIteration:
        first = None
    except BaseException:
        events.close()
        raise
    return ResponseStream(_Chunks(first, events, parse), events._stop)


class _Chunks(Generic[Chunk]):
    """``first`` and the events after it, as chunks. Closing them closes the request,
    read or not (a generator never started would run no ``finally``)."""

    def __init__(
        self, first: JSON | None, events: ResponseStream[JSON], parse: Callable[[JSON], Chunk]
    ) -> None:
        self._first = first
        self._started = first is None  # (an empty stream has nothing before its end)
        self._events = events
        self._parse: Callable[[JSON], Chunk] = parse

    def __iter__(self) -> _Chunks[Chunk]:
        return self

    def __next__(self) -> Chunk:
        if not self._started:
            self._started = True
            assert self._first is not None
            return self._parse(self._first)
        return self._parse(next(self._events))

    def close(self) -> None:
        self._events.close()
