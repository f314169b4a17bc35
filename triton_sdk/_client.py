"""The blocking client and its model handle."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import Final, Literal, TypeVar, overload

from ._backends._metrics import fetch_metrics
from ._backends._protocol import SyncBackend
from ._base import (
    MAX_CHUNKS_IN_FLIGHT,
    ClientSettings,
    ModelCore,
    Timeout,
    client_repr,
    closed_error,
    config_json,
)
from ._classify import Classification, parse_classifications
from ._config import DEFAULT_TIMEOUT, NOT_GIVEN, NotGiven, RetryPolicy, TLSConfig
from ._errors import TritonError, TritonTimeoutError
from ._generate import JSONValue
from ._map import MapPlan, Outcome, PreparedSample, progress_bar
from ._operations import (
    LogSettings,
    ModelStatistics,
    ServerMetrics,
    TraceSettings,
    log_updates,
    trace_updates,
)
from ._request import InferRequest, ParameterValue
from ._result import InferResult
from ._retry import call_sync
from ._sequence import SequenceState
from ._shaping import InputValue
from ._spec import ModelSpec
from ._status import ModelStatus, ServerMetadata
from ._streams import ResponseStream

__all__ = ["Client", "Model", "ModelSequence"]

T = TypeVar("T")

DEFAULT_RETRY: Final = RetryPolicy()
_ONCE: Final = RetryPolicy.none()
_POLL_INTERVAL: Final = 0.1


def _open_backend(settings: ClientSettings) -> SyncBackend:
    endpoint = settings.endpoint
    if endpoint.protocol == "grpc":
        from ._backends._grpc import GrpcBackend

        return GrpcBackend(endpoint, headers=settings.headers, tls=settings.tls)
    from ._backends._http import HttpBackend

    return HttpBackend(endpoint, headers=settings.headers, tls=settings.tls)


class Client:
    """A blocking client for one Triton server, over gRPC or HTTP.

    ``Client("localhost:8001")`` and ``Client("grpc://...")`` speak gRPC,
    ``Client("http://...")`` HTTP; ``grpcs://`` and ``https://`` add TLS. One client may
    be shared by any number of threads, on both protocols, and may be called from code
    running inside an event loop (it never starts one).

    Args:
        url: the server's address.
        timeout: seconds each attempt of a call may take; ``None`` for no limit.
            Calls may override it with their own ``timeout``.
        retry: how failed idempotent calls are repeated; ``RetryPolicy.none()`` for never.
        headers: sent with every request (gRPC metadata keys are lower-cased).
        tls: certificate files for ``grpcs://`` and ``https://``.
        metrics_url: the server's Prometheus endpoint, for :meth:`metrics`; by default
            the same host on port 8002 (Triton's default).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        headers: Mapping[str, str] | None = None,
        tls: TLSConfig | None = None,
        metrics_url: str | None = None,
    ) -> None:
        self._settings = ClientSettings.create(
            url, timeout=timeout, retry=retry, headers=headers, tls=tls, metrics_url=metrics_url
        )
        self._backend = _open_backend(self._settings)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return client_repr("Client", self._settings)

    @property
    def url(self) -> str:
        """The server's address, normalised (``grpc://host:port`` or ``http://host:port``)."""
        return str(self._settings.endpoint)

    def _call(
        self,
        what: str,
        attempt: Callable[[float | None], T],
        *,
        timeout: Timeout = NOT_GIVEN,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        idempotent: bool = True,
        started: float | None = None,
    ) -> T:
        if self._closed:
            raise closed_error("Client")
        return call_sync(
            attempt,
            policy=self._settings.retry_for(retry),
            timeout=self._settings.timeout_for(timeout),
            idempotent=idempotent,
            what=what,
            started=started,
        )

    # Health and server

    def _healthy(
        self,
        what: str,
        attempt: Callable[[float | None], bool],
        timeout: Timeout,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
    ) -> bool:
        try:
            return self._call(what, attempt, timeout=timeout, retry=retry)
        except TritonError:
            return False

    def is_live(self, *, timeout: Timeout = NOT_GIVEN) -> bool:
        """Whether the server answers as live; False (never an error) when unreachable."""
        return self._healthy("is_live", self._backend.is_live, timeout)

    def is_ready(self, *, timeout: Timeout = NOT_GIVEN) -> bool:
        """Whether the server is ready for inference; False when unreachable."""
        return self._healthy("is_ready", self._backend.is_ready, timeout)

    def is_model_ready(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> bool:
        """Whether a model (a given version, or the one the server's policy picks) is ready."""
        attempt = partial(self._backend.is_model_ready, name, version)
        return self._healthy("is_model_ready", attempt, timeout)

    def wait_until_ready(self, timeout: float = 60.0, *, model: str | None = None) -> None:
        """Poll until the server (and ``model``, if given) is ready.

        Raises TritonTimeoutError when ``timeout`` seconds pass first.
        """
        model_ready = None if model is None else partial(self._backend.is_model_ready, model, None)
        deadline = time.monotonic() + timeout
        while True:
            each = max(min(deadline - time.monotonic(), 1.0), 0.01)
            ready = self._healthy("is_ready", self._backend.is_ready, each, _ONCE) and (
                model_ready is None or self._healthy("is_model_ready", model_ready, each, _ONCE)
            )
            if ready:
                return
            if time.monotonic() + _POLL_INTERVAL > deadline:
                what = "the server" if model is None else f"model {model!r}"
                raise TritonTimeoutError(f"{what} at {self.url} was not ready after {timeout}s")
            time.sleep(_POLL_INTERVAL)

    def server_metadata(self, *, timeout: Timeout = NOT_GIVEN) -> ServerMetadata:
        """The server's name, version and protocol extensions."""
        data = self._call("server_metadata", self._backend.server_metadata, timeout=timeout)
        return ServerMetadata.from_json(data)

    # Model repository

    def models(self, *, timeout: Timeout = NOT_GIVEN) -> list[ModelStatus]:
        """Every model in the repository, with its version and state."""
        entries = self._call("models", self._backend.repository_index, timeout=timeout)
        return [ModelStatus.from_json(entry) for entry in entries]

    def load_model(
        self,
        name: str,
        config: Mapping[str, object] | str | None = None,
        *,
        files: Mapping[str, bytes] | None = None,
        timeout: Timeout = NOT_GIVEN,
    ) -> None:
        """Load (or reload) a model; needs ``--model-control-mode=explicit`` on the server.

        ``config`` overrides the model's config.pbtxt (a mapping in the JSON form of the
        config, or its JSON text); ``files`` maps ``"file:<path in model dir>"`` to bytes.
        Not retried: a load with an override really reloads the model.
        """
        attempt = partial(self._backend.load_model, name, config_json(config), files)
        self._call("load_model", attempt, timeout=timeout, idempotent=False)

    def unload_model(
        self, name: str, *, unload_dependents: bool = False, timeout: Timeout = NOT_GIVEN
    ) -> None:
        """Unload a model; needs ``--model-control-mode=explicit`` on the server."""
        attempt = partial(self._backend.unload_model, name, unload_dependents)
        self._call("unload_model", attempt, timeout=timeout)

    # Statistics, metrics, trace and log settings

    def model_statistics(
        self, name: str | None = None, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> list[ModelStatistics]:
        """The server's statistics of one model (a version, or all its versions) or of all.

        Counts and cumulative durations since each model version was loaded.
        """
        attempt = partial(self._backend.model_statistics, name, version)
        entries = self._call("model_statistics", attempt, timeout=timeout)
        return [ModelStatistics.from_json(entry) for entry in entries]

    def metrics(self, *, url: str | None = None, timeout: Timeout = NOT_GIVEN) -> ServerMetrics:
        """The server's Prometheus metrics, parsed: per-model figures and server gauges.

        Read from ``url``, else the client's ``metrics_url`` (the server's metrics port,
        8002 by default).
        """
        settings = self._settings
        attempt = partial(
            fetch_metrics, url or settings.metrics_url, headers=settings.headers, tls=settings.tls
        )
        return ServerMetrics.from_text(self._call("metrics", attempt, timeout=timeout))

    def trace_settings(
        self, model: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> TraceSettings:
        """The server's trace settings, or one model's (needs the trace extension)."""
        attempt = partial(self._backend.trace_settings, model, None)
        return TraceSettings.from_json(self._call("trace_settings", attempt, timeout=timeout))

    def update_trace_settings(
        self,
        model: str | None = None,
        *,
        level: Iterable[str] | None = None,
        rate: int | None = None,
        count: int | None = None,
        log_frequency: int | None = None,
        timeout: Timeout = NOT_GIVEN,
    ) -> TraceSettings:
        """Change trace settings (server-wide, or for one model); returns the new ones.

        The server takes the trace file only at start (``--trace-config
        triton,file=PATH``); turning tracing on (``level``) needs one.
        """
        updates = trace_updates(level=level, rate=rate, count=count, log_frequency=log_frequency)
        attempt = partial(self._backend.trace_settings, model, updates)
        return TraceSettings.from_json(self._call("trace_settings", attempt, timeout=timeout))

    def log_settings(self, *, timeout: Timeout = NOT_GIVEN) -> LogSettings:
        """The server's log settings (needs the logging extension)."""
        attempt = partial(self._backend.log_settings, None)
        return LogSettings.from_json(self._call("log_settings", attempt, timeout=timeout))

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
        attempt = partial(self._backend.log_settings, updates)
        return LogSettings.from_json(self._call("log_settings", attempt, timeout=timeout))

    # Model handles

    def model_spec(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> ModelSpec:
        """The typed description of a model, read from its metadata and config."""
        started = time.monotonic()
        metadata = self._call(
            "model_metadata",
            partial(self._backend.model_metadata, name, version),
            timeout=timeout,
            started=started,
        )
        config = self._call(
            "model_config",
            partial(self._backend.model_config, name, version),
            timeout=timeout,
            started=started,
        )
        return ModelSpec.from_metadata(metadata, config)

    def model(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> Model:
        """A typed handle on a model; reads its metadata and config once.

        Raises ModelNotFoundError when the server has no such model (or version).
        """
        return Model(self, self.model_spec(name, version, timeout=timeout), version)

    # Inference plumbing for Model

    def _infer_one(
        self,
        request: InferRequest,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven,
        started: float | None = None,
    ) -> InferResult:
        return self._call(
            request.model,
            partial(self._backend.infer, request),
            timeout=timeout,
            retry=retry,
            idempotent=request.idempotent,
            started=started,
        )

    def _infer(
        self, requests: list[InferRequest], timeout: Timeout, retry: RetryPolicy | NotGiven
    ) -> InferResult:
        if len(requests) == 1:
            return self._infer_one(requests[0], timeout, retry)
        started = time.monotonic()  # one retry deadline for all the chunks
        executor = self._chunk_executor()
        try:
            parts = executor.map(
                lambda request: self._infer_one(request, timeout, retry, started), requests
            )
        except RuntimeError as exc:  # the pool was shut down by close() meanwhile
            raise closed_error("Client") from exc
        return InferResult.concatenate(list(parts))

    def _chunk_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise closed_error("Client")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    MAX_CHUNKS_IN_FLIGHT, thread_name_prefix="triton_sdk"
                )
            return self._executor

    def _stream(
        self, request: InferRequest, spec: ModelSpec, timeout: Timeout
    ) -> Iterator[InferResult]:
        if self._closed:
            raise closed_error("Client")
        return self._backend.stream(request, spec, self._settings.timeout_for(timeout))

    def _generate(
        self,
        model: Model,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven,
    ) -> dict[str, JSONValue]:
        attempt = partial(self._backend.generate, model.spec, model.version, fields, parameters)
        return self._call(f"generate {model.name}", attempt, timeout=timeout, retry=retry)

    def _generate_stream(
        self,
        model: Model,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: Timeout,
    ) -> Iterator[dict[str, JSONValue]]:
        if self._closed:
            raise closed_error("Client")
        return self._backend.generate_stream(
            model.spec, model.version, fields, parameters, self._settings.timeout_for(timeout)
        )

    # Lifetime

    def close(self) -> None:
        """Close the connections. The client cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._backend.close()

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
    """A typed handle on one model of a :class:`Client`.

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
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue,
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
            retry: this call's retry policy, instead of the client's.
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
        return self._client._infer(requests, timeout, retry)

    def infer_sample(
        self,
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue,
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
        result = self._client._infer(requests, timeout, retry)
        return result.without_batch_axis() if self.spec.batched else result

    def classify(
        self,
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        top_k: int = 1,
        output: str | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        request_id: str = "",
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        **named_inputs: InputValue,
    ) -> list[list[Classification]]:
        """The ``top_k`` classes of each sample, best first, from the server's classification.

        Inputs are batched as in :meth:`infer`. ``output`` names the scores to classify
        (optional when the model has one output); labels come from the output's label
        file and are None without one.
        """
        name = self._classification_output(output, top_k)
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
        result = self._client._infer(requests, timeout, retry)
        return parse_classifications(result[name], batched=self.spec.batched)

    def stream(
        self,
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        request_id: str = "",
        **named_inputs: InputValue,
    ) -> ResponseStream[InferResult]:
        """Send one request and iterate over the model's responses (decoupled models).

        Inputs are shaped as in :meth:`infer`. The iteration ends after the final
        response (no responses at all is an empty iteration); ``timeout`` bounds the wait
        for each response. Leaving the loop early cancels the request. Streams are never
        retried. Over HTTP the request goes through the generate_stream extension, which
        carries one sample of scalar or 1-D inputs; gRPC streams anything.
        """
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
        return ResponseStream(self._client._stream(request, self.spec, timeout))

    def generate(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        **named_fields: object,
    ) -> dict[str, JSONValue]:
        """Run the model through the generate extension: JSON fields in, JSON fields out.

        Fields named like inputs are one sample of that input; other fields are request
        parameters. Returns the response's outputs (a one-element output as its plain
        value, BYTES as text). Works on gRPC too, through an inference or a stream.
        """
        merged = {**(fields or {}), **named_fields}
        return self._client._generate(self, merged, parameters, timeout, retry)

    def generate_stream(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        **named_fields: object,
    ) -> ResponseStream[dict[str, JSONValue]]:
        """Like :meth:`generate`, yielding the fields of each response as it arrives."""
        merged = {**(fields or {}), **named_fields}
        return ResponseStream(self._client._generate_stream(self, merged, parameters, timeout))

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
        samples: Iterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["raise"] = ...,
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven = ...,
    ) -> Iterator[InferResult]: ...

    @overload
    def map(
        self,
        samples: Iterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["collect"],
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven = ...,
    ) -> Iterator[InferResult | TritonError]: ...

    def map(
        self,
        samples: Iterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = None,
        concurrency: int = 4,
        progress: bool = False,
        errors: Literal["raise", "collect"] = "raise",
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
    ) -> Iterator[InferResult] | Iterator[InferResult | TritonError]:
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
        plan = MapPlan(self.spec, self.version, batch_size, concurrency, errors, outputs)
        return _MapRunner(self, plan, timeout, retry).run(samples, progress)


class ModelSequence:
    """A sequence of requests to a stateful model; see :meth:`Model.sequence`.

    Leaving the ``with`` block without a request sent with ``end=True`` sends nothing
    more: it warns (:class:`SequenceNotEndedWarning`) that the server keeps the
    sequence's slot until it idles out.
    """

    __slots__ = ("_model", "_state")

    def __init__(self, model: Model, sequence_id: int | str | None = None) -> None:
        self._model = model
        self._state = SequenceState(model.spec, sequence_id)

    @property
    def sequence_id(self) -> int | str:
        """The id every request of this sequence carries."""
        return self._state.sequence_id

    @property
    def ended(self) -> bool:
        """Whether the request marked ``end=True`` was sent."""
        return self._state.ended

    def _send(
        self,
        inputs: Mapping[str, InputValue] | None,
        named: Mapping[str, InputValue],
        *,
        sample: bool,
        end: bool,
        outputs: Iterable[str] | None,
        timeout: Timeout,
        parameters: Mapping[str, ParameterValue] | None,
        priority: int,
        request_id: str,
    ) -> InferResult:
        model = self._model
        (request,) = model._requests(
            inputs,
            named,
            outputs=outputs,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=sample,
            sequence=self._state.flags(end),
        )
        if model._client._closed:
            raise closed_error("Client")
        # Counted before it goes out, so that a request sent meanwhile (from another
        # task or thread) cannot carry START a second time.
        self._state.sent_one(end)
        result = model._client._infer_one(request, timeout, _ONCE)
        return result.without_batch_axis() if sample and model.spec.batched else result

    def infer(
        self,
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        end: bool = False,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        request_id: str = "",
        **named_inputs: InputValue,
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
        )

    def infer_sample(
        self,
        inputs: Mapping[str, InputValue] | None = None,
        /,
        *,
        end: bool = False,
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        priority: int = 0,
        request_id: str = "",
        **named_inputs: InputValue,
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
    """The blocking driver of :meth:`Model.map`: a window of batches on a thread pool."""

    def __init__(
        self, model: Model, plan: MapPlan, timeout: Timeout, retry: RetryPolicy | NotGiven
    ):
        self.model = model
        self.plan = plan
        self.timeout = timeout
        self.retry = retry

    def _run_batch(self, samples: list[PreparedSample]) -> list[Outcome]:
        if samples[0].error is not None:
            return [samples[0].error]
        plan = self.plan
        try:
            result = self.model._client._infer_one(plan.request(samples), self.timeout, self.retry)
        except TritonError as error:
            if plan.isolate(samples, error):
                return [outcome for sample in samples for outcome in self._run_batch([sample])]
            return [error] * len(samples)
        return plan.outcomes(samples, result)

    def run(self, samples: Iterable[Mapping[str, InputValue]], progress: bool) -> Iterator[Outcome]:
        plan = self.plan
        bar = progress_bar(samples) if progress else None
        pool = ThreadPoolExecutor(plan.concurrency, thread_name_prefix="triton_sdk-map")
        window: deque[Future[list[Outcome]]] = deque()

        def drain(limit: int) -> Iterator[Outcome]:
            while len(window) > limit:
                for outcome in window.popleft().result():
                    if bar is not None:
                        bar.update(1)
                    yield plan.emit(outcome)

        try:
            for sample in samples:
                for batch in plan.builder.add(sample):
                    window.append(pool.submit(self._run_batch, batch))
                    yield from drain(plan.concurrency - 1)
            for batch in plan.builder.flush():
                window.append(pool.submit(self._run_batch, batch))
            yield from drain(0)
        finally:
            for future in window:
                future.cancel()
            pool.shutdown(wait=True)
            if bar is not None:
                bar.close()
