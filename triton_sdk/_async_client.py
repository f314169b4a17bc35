"""The asyncio client and its model handle: the same surface as ``_client``, awaited."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from types import TracebackType
from typing import Final, Literal, TypeVar, overload

from ._backends._metrics import fetch_metrics_async
from ._backends._protocol import AsyncBackend
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
from ._retry import call_async
from ._sequence import SequenceState
from ._shaping import InputValue
from ._spec import ModelSpec
from ._status import ModelStatus, ServerMetadata
from ._streams import AsyncResponseStream

__all__ = ["AsyncClient", "AsyncModel", "AsyncModelSequence"]

T = TypeVar("T")

DEFAULT_RETRY: Final = RetryPolicy()
_ONCE: Final = RetryPolicy.none()
_POLL_INTERVAL: Final = 0.1


def _open_backend(settings: ClientSettings) -> AsyncBackend:
    endpoint = settings.endpoint
    if endpoint.protocol == "grpc":
        from ._backends._grpc import AsyncGrpcBackend

        return AsyncGrpcBackend(endpoint, headers=settings.headers, tls=settings.tls)
    from ._backends._http import AsyncHttpBackend

    return AsyncHttpBackend(endpoint, headers=settings.headers, tls=settings.tls)


class AsyncClient:
    """An asyncio client for one Triton server, over gRPC or HTTP.

    The same surface as :class:`Client`, with every network method a coroutine. A client
    belongs to the event loop it is first used in; open it with ``async with`` or close
    it with :meth:`aclose`.

    Args:
        url: the server's address (``grpc://``, ``grpcs://``, ``http://``, ``https://``;
            no scheme means gRPC).
        timeout: seconds each attempt of a call may take; ``None`` for no limit.
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
        self._closed = False

    def __repr__(self) -> str:
        return client_repr("AsyncClient", self._settings)

    @property
    def url(self) -> str:
        """The server's address, normalised (``grpc://host:port`` or ``http://host:port``)."""
        return str(self._settings.endpoint)

    async def _call(
        self,
        what: str,
        attempt: Callable[[float | None], Awaitable[T]],
        *,
        timeout: Timeout = NOT_GIVEN,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        idempotent: bool = True,
        started: float | None = None,
    ) -> T:
        if self._closed:
            raise closed_error("AsyncClient")
        return await call_async(
            attempt,
            policy=self._settings.retry_for(retry),
            timeout=self._settings.timeout_for(timeout),
            idempotent=idempotent,
            what=what,
            started=started,
        )

    # Health and server

    async def _healthy(
        self,
        what: str,
        attempt: Callable[[float | None], Awaitable[bool]],
        timeout: Timeout,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
    ) -> bool:
        try:
            return await self._call(what, attempt, timeout=timeout, retry=retry)
        except TritonError:
            return False

    async def is_live(self, *, timeout: Timeout = NOT_GIVEN) -> bool:
        """Whether the server answers as live; False (never an error) when unreachable."""
        return await self._healthy("is_live", self._backend.is_live, timeout)

    async def is_ready(self, *, timeout: Timeout = NOT_GIVEN) -> bool:
        """Whether the server is ready for inference; False when unreachable."""
        return await self._healthy("is_ready", self._backend.is_ready, timeout)

    async def is_model_ready(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> bool:
        """Whether a model (a given version, or the one the server's policy picks) is ready."""
        attempt = partial(self._backend.is_model_ready, name, version)
        return await self._healthy("is_model_ready", attempt, timeout)

    async def wait_until_ready(self, timeout: float = 60.0, *, model: str | None = None) -> None:
        """Poll until the server (and ``model``, if given) is ready.

        Raises TritonTimeoutError when ``timeout`` seconds pass first.
        """
        model_ready = None if model is None else partial(self._backend.is_model_ready, model, None)
        deadline = time.monotonic() + timeout
        while True:
            each = max(min(deadline - time.monotonic(), 1.0), 0.01)
            ready = await self._healthy("is_ready", self._backend.is_ready, each, _ONCE) and (
                model_ready is None
                or await self._healthy("is_model_ready", model_ready, each, _ONCE)
            )
            if ready:
                return
            if time.monotonic() + _POLL_INTERVAL > deadline:
                what = "the server" if model is None else f"model {model!r}"
                raise TritonTimeoutError(f"{what} at {self.url} was not ready after {timeout}s")
            await asyncio.sleep(_POLL_INTERVAL)

    async def server_metadata(self, *, timeout: Timeout = NOT_GIVEN) -> ServerMetadata:
        """The server's name, version and protocol extensions."""
        data = await self._call("server_metadata", self._backend.server_metadata, timeout=timeout)
        return ServerMetadata.from_json(data)

    # Model repository

    async def models(self, *, timeout: Timeout = NOT_GIVEN) -> list[ModelStatus]:
        """Every model in the repository, with its version and state."""
        entries = await self._call("models", self._backend.repository_index, timeout=timeout)
        return [ModelStatus.from_json(entry) for entry in entries]

    async def load_model(
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
        await self._call("load_model", attempt, timeout=timeout, idempotent=False)

    async def unload_model(
        self, name: str, *, unload_dependents: bool = False, timeout: Timeout = NOT_GIVEN
    ) -> None:
        """Unload a model; needs ``--model-control-mode=explicit`` on the server."""
        attempt = partial(self._backend.unload_model, name, unload_dependents)
        await self._call("unload_model", attempt, timeout=timeout)

    # Statistics, metrics, trace and log settings

    async def model_statistics(
        self, name: str | None = None, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> list[ModelStatistics]:
        """The server's statistics of one model (a version, or all its versions) or of all.

        Counts and cumulative durations since each model version was loaded.
        """
        attempt = partial(self._backend.model_statistics, name, version)
        entries = await self._call("model_statistics", attempt, timeout=timeout)
        return [ModelStatistics.from_json(entry) for entry in entries]

    async def metrics(
        self, *, url: str | None = None, timeout: Timeout = NOT_GIVEN
    ) -> ServerMetrics:
        """The server's Prometheus metrics, parsed: per-model figures and server gauges.

        Read from ``url``, else the client's ``metrics_url`` (the server's metrics port,
        8002 by default).
        """
        settings = self._settings
        attempt = partial(
            fetch_metrics_async,
            url or settings.metrics_url,
            headers=settings.headers,
            tls=settings.tls,
        )
        return ServerMetrics.from_text(await self._call("metrics", attempt, timeout=timeout))

    async def trace_settings(
        self, model: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> TraceSettings:
        """The server's trace settings, or one model's (needs the trace extension)."""
        attempt = partial(self._backend.trace_settings, model, None)
        return TraceSettings.from_json(await self._call("trace_settings", attempt, timeout=timeout))

    async def update_trace_settings(
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
        return TraceSettings.from_json(await self._call("trace_settings", attempt, timeout=timeout))

    async def log_settings(self, *, timeout: Timeout = NOT_GIVEN) -> LogSettings:
        """The server's log settings (needs the logging extension)."""
        attempt = partial(self._backend.log_settings, None)
        return LogSettings.from_json(await self._call("log_settings", attempt, timeout=timeout))

    async def update_log_settings(
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
        return LogSettings.from_json(await self._call("log_settings", attempt, timeout=timeout))

    # Model handles

    async def model_spec(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> ModelSpec:
        """The typed description of a model, read from its metadata and config."""
        started = time.monotonic()
        metadata = await self._call(
            "model_metadata",
            partial(self._backend.model_metadata, name, version),
            timeout=timeout,
            started=started,
        )
        config = await self._call(
            "model_config",
            partial(self._backend.model_config, name, version),
            timeout=timeout,
            started=started,
        )
        return ModelSpec.from_metadata(metadata, config)

    async def model(
        self, name: str, version: str | None = None, *, timeout: Timeout = NOT_GIVEN
    ) -> AsyncModel:
        """A typed handle on a model; reads its metadata and config once.

        Raises ModelNotFoundError when the server has no such model (or version).
        """
        return AsyncModel(self, await self.model_spec(name, version, timeout=timeout), version)

    # Inference plumbing for AsyncModel

    async def _infer_one(
        self,
        request: InferRequest,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven,
        started: float | None = None,
    ) -> InferResult:
        return await self._call(
            request.model,
            partial(self._backend.infer, request),
            timeout=timeout,
            retry=retry,
            idempotent=request.idempotent,
            started=started,
        )

    async def _infer(
        self, requests: list[InferRequest], timeout: Timeout, retry: RetryPolicy | NotGiven
    ) -> InferResult:
        if len(requests) == 1:
            return await self._infer_one(requests[0], timeout, retry)
        slots = asyncio.Semaphore(MAX_CHUNKS_IN_FLIGHT)
        started = time.monotonic()  # one retry deadline for all the chunks

        async def one(request: InferRequest) -> InferResult:
            async with slots:
                return await self._infer_one(request, timeout, retry, started)

        tasks = [asyncio.ensure_future(one(request)) for request in requests]
        try:
            parts = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        return InferResult.concatenate(parts)

    def _stream(
        self, request: InferRequest, spec: ModelSpec, timeout: Timeout
    ) -> AsyncIterator[InferResult]:
        if self._closed:
            raise closed_error("AsyncClient")
        return self._backend.stream(request, spec, self._settings.timeout_for(timeout))

    async def _generate(
        self,
        model: AsyncModel,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven,
    ) -> dict[str, JSONValue]:
        attempt = partial(self._backend.generate, model.spec, model.version, fields, parameters)
        return await self._call(f"generate {model.name}", attempt, timeout=timeout, retry=retry)

    def _generate_stream(
        self,
        model: AsyncModel,
        fields: Mapping[str, object],
        parameters: Mapping[str, ParameterValue] | None,
        timeout: Timeout,
    ) -> AsyncIterator[dict[str, JSONValue]]:
        if self._closed:
            raise closed_error("AsyncClient")
        return self._backend.generate_stream(
            model.spec, model.version, fields, parameters, self._settings.timeout_for(timeout)
        )

    # Lifetime

    async def aclose(self) -> None:
        """Close the connections. The client cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        await self._backend.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncModel(ModelCore):
    """A typed handle on one model of an :class:`AsyncClient`; methods are coroutines.

    Attributes:
        name: the model's name.
        version: the version asked for; ``None`` lets the server's version policy pick.
        spec: the model's inputs, outputs and scheduling, as a :class:`ModelSpec`.
    """

    __slots__ = ("_client",)

    def __init__(self, client: AsyncClient, spec: ModelSpec, version: str | None) -> None:
        super().__init__(spec, version)
        self._client = client

    async def infer(
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

        See :meth:`Model.infer`.
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
        return await self._client._infer(requests, timeout, retry)

    async def infer_sample(
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
        """Run one sample: no batch axis in or out. See :meth:`Model.infer_sample`."""
        requests = self._requests(
            inputs,
            named_inputs,
            outputs=outputs,
            parameters=parameters,
            priority=priority,
            request_id=request_id,
            sample=True,
        )
        result = await self._client._infer(requests, timeout, retry)
        return result.without_batch_axis() if self.spec.batched else result

    async def classify(
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
        """The ``top_k`` classes of each sample, best first. See :meth:`Model.classify`."""
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
        result = await self._client._infer(requests, timeout, retry)
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
    ) -> AsyncResponseStream[InferResult]:
        """Send one request; ``async for`` over the responses. See :meth:`Model.stream`."""
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
        return AsyncResponseStream(self._client._stream(request, self.spec, timeout))

    async def generate(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
        **named_fields: object,
    ) -> dict[str, JSONValue]:
        """JSON fields in, JSON fields out. See :meth:`Model.generate`."""
        merged = {**(fields or {}), **named_fields}
        return await self._client._generate(self, merged, parameters, timeout, retry)

    def generate_stream(
        self,
        fields: Mapping[str, object] | None = None,
        /,
        *,
        timeout: Timeout = NOT_GIVEN,
        parameters: Mapping[str, ParameterValue] | None = None,
        **named_fields: object,
    ) -> AsyncResponseStream[dict[str, JSONValue]]:
        """``async for`` over the fields of each response. See :meth:`Model.generate_stream`."""
        merged = {**(fields or {}), **named_fields}
        return AsyncResponseStream(self._client._generate_stream(self, merged, parameters, timeout))

    def sequence(self, sequence_id: int | str | None = None) -> AsyncModelSequence:
        """A sequence of requests: ``async with model.sequence() as seq:``.

        See :meth:`Model.sequence`.
        """
        return AsyncModelSequence(self, sequence_id)

    @overload
    def map(
        self,
        samples: Iterable[Mapping[str, InputValue]] | AsyncIterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["raise"] = ...,
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven = ...,
    ) -> AsyncIterator[InferResult]: ...

    @overload
    def map(
        self,
        samples: Iterable[Mapping[str, InputValue]] | AsyncIterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = ...,
        concurrency: int = ...,
        progress: bool = ...,
        errors: Literal["collect"],
        outputs: Iterable[str] | None = ...,
        timeout: Timeout = ...,
        retry: RetryPolicy | NotGiven = ...,
    ) -> AsyncIterator[InferResult | TritonError]: ...

    def map(
        self,
        samples: Iterable[Mapping[str, InputValue]] | AsyncIterable[Mapping[str, InputValue]],
        *,
        batch_size: int | None = None,
        concurrency: int = 4,
        progress: bool = False,
        errors: Literal["raise", "collect"] = "raise",
        outputs: Iterable[str] | None = None,
        timeout: Timeout = NOT_GIVEN,
        retry: RetryPolicy | NotGiven = NOT_GIVEN,
    ) -> AsyncIterator[InferResult] | AsyncIterator[InferResult | TritonError]:
        """``async for`` over one result per sample, in order. See :meth:`Model.map`.

        ``samples`` may be a plain or an asynchronous iterable.
        """
        plan = MapPlan(self.spec, self.version, batch_size, concurrency, errors, outputs)
        return _AsyncMapRunner(self, plan, timeout, retry).run(samples, progress)


class AsyncModelSequence:
    """A sequence of requests to a stateful model; see :meth:`AsyncModel.sequence`."""

    __slots__ = ("_model", "_state")

    def __init__(self, model: AsyncModel, sequence_id: int | str | None = None) -> None:
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

    async def _send(
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
            raise closed_error("AsyncClient")
        # Counted before it goes out, so that a request sent meanwhile (from another
        # task or thread) cannot carry START a second time.
        self._state.sent_one(end)
        result = await model._client._infer_one(request, timeout, _ONCE)
        return result.without_batch_axis() if sample and model.spec.batched else result

    async def infer(
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
        """Send the next request of the sequence (batched inputs)."""
        return await self._send(
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

    async def infer_sample(
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
        """Send the next request as one sample."""
        return await self._send(
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

    async def __aenter__(self) -> AsyncModelSequence:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._state.leave()


async def _each(
    samples: Iterable[Mapping[str, InputValue]] | AsyncIterable[Mapping[str, InputValue]],
) -> AsyncIterator[Mapping[str, InputValue]]:
    if isinstance(samples, AsyncIterable):
        async for sample in samples:
            yield sample
    else:
        for sample in samples:
            yield sample


class _AsyncMapRunner:
    """The asyncio driver of :meth:`AsyncModel.map`: a window of batch tasks."""

    def __init__(
        self, model: AsyncModel, plan: MapPlan, timeout: Timeout, retry: RetryPolicy | NotGiven
    ):
        self.model = model
        self.plan = plan
        self.timeout = timeout
        self.retry = retry

    async def _run_batch(self, samples: list[PreparedSample]) -> list[Outcome]:
        if samples[0].error is not None:
            return [samples[0].error]
        plan = self.plan
        client = self.model._client
        try:
            result = await client._infer_one(plan.request(samples), self.timeout, self.retry)
        except TritonError as error:
            if plan.isolate(samples, error):
                return [
                    outcome for sample in samples for outcome in await self._run_batch([sample])
                ]
            return [error] * len(samples)
        return plan.outcomes(samples, result)

    async def run(
        self,
        samples: Iterable[Mapping[str, InputValue]] | AsyncIterable[Mapping[str, InputValue]],
        progress: bool,
    ) -> AsyncIterator[Outcome]:
        plan = self.plan
        bar = progress_bar(samples) if progress else None
        window: deque[asyncio.Task[list[Outcome]]] = deque()

        async def finish_oldest() -> list[Outcome]:
            outcomes = await window.popleft()
            if bar is not None:
                bar.update(len(outcomes))
            return outcomes

        try:
            async for sample in _each(samples):
                for batch in plan.builder.add(sample):
                    window.append(asyncio.ensure_future(self._run_batch(batch)))
                    while len(window) >= plan.concurrency:
                        for outcome in await finish_oldest():
                            yield plan.emit(outcome)
            for batch in plan.builder.flush():
                window.append(asyncio.ensure_future(self._run_batch(batch)))
            while window:
                for outcome in await finish_oldest():
                    yield plan.emit(outcome)
        finally:
            for task in window:
                task.cancel()
            await asyncio.gather(*window, return_exceptions=True)
            if bar is not None:
                bar.close()
