"""What ``Client`` and ``AsyncClient`` (and their model handles) share: everything but I/O."""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, Literal, NamedTuple, NoReturn

import attrs

from ._call import CallHook, CallOptions
from ._chat_template import (
    PLAIN_TOKENS,
    ChatTemplate,
    ChatTemplateError,
    Message,
    load_chat_template,
)
from ._checks import (
    check_header_size,
    check_headers,
    check_int,
    check_text,
    check_timeout,
    overlay_headers,
)
from ._compression import Compression, check_compression
from ._config import (
    NOT_GIVEN,
    DnsName,
    Endpoint,
    NotGiven,
    RetryPolicy,
    TLSConfig,
    check_metrics_url,
    parse_dns,
    parse_url,
    resolve_addresses,
)
from ._errors import (
    InvalidInputError,
    TritonError,
    TritonTimeoutError,
    UnsupportedError,
    never_sent,
    refused_before_sending,
)
from ._llm import Adapter, LLMAdapter, LLMCall, SamplingValue, adapter_for
from ._logging import LogCalls, wanted
from ._request import (
    InferRequest,
    ParameterInput,
    Priority,
    RequestedOutput,
    check_outputs,
    check_parameters,
    check_priority,
    output_names,
)
from ._shaping import InputValue, prepare_inputs, split_batch
from ._shm import PlacementPlan
from ._spec import ModelSpec, stateful_message

__all__ = ["ClientSettings", "ModelCore", "Timeout"]

Resolver = Callable[[str], Sequence[str]]
"""A DNS name's addresses (``resolver("triton-headless")`` -> ``["10.0.0.7", ...]``)."""

DEFAULT_RESOLVE_INTERVAL = 30.0
SHORTEST_RESOLVE_INTERVAL: Final = 0.05
"""A shorter one would have the upkeep thread resolve the name thousands of times a
second (a flood of DNS queries)."""

CLASSIFIABLE: Final = frozenset(
    {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP32", "FP64"}
)
"""The datatypes of outputs the server's classification extension can rank."""

Timeout = float | None | NotGiven
"""Seconds; ``None`` for no timeout; ``NOT_GIVEN`` for the client's default."""

HttpBinary = bool | Literal["auto"]
"""How HTTP carries tensors: Triton's binary extension (``True``), JSON ``data``
(``False``), or binary for Triton and JSON for other servers (``"auto"``)."""


@attrs.frozen(kw_only=True)
class ClientSettings:
    """A client's configuration, resolved once at construction."""

    endpoints: tuple[Endpoint, ...]
    """The URLs' endpoints; for a DNS name, the name's endpoint (its host is the name)."""
    dns: DnsName | None
    """The DNS name whose addresses are the endpoints, re-resolved every
    ``resolve_interval`` seconds and after failures."""
    resolver: Resolver
    resolve_interval: float
    max_connection_age: float | None
    timeout: float | None
    retry: RetryPolicy
    headers: Mapping[str, str] = attrs.field(repr=False)
    tls: TLSConfig | None
    metrics_url: str
    hooks: tuple[CallHook, ...] = ()
    compression: Compression = None
    http_binary: HttpBinary = "auto"
    _defaults: CallOptions | None = attrs.field(init=False, repr=False, eq=False)

    @property
    def endpoint(self) -> Endpoint:
        """The first endpoint (the only one of a client of one URL)."""
        return self.endpoints[0]

    @_defaults.default
    def _options_of_plain_calls(self) -> CallOptions | None:
        """The options of a call that sets none of its own, made once (None when the
        retry policy has a deadline, which starts with each call)."""
        if self.retry.deadline is not None:
            return None
        return CallOptions(self.timeout, self.retry, self.headers)

    @classmethod
    def create(
        cls,
        url: str | Sequence[str],
        *,
        timeout: float | None,
        retry: RetryPolicy | None,
        headers: Mapping[str, str] | None,
        tls: TLSConfig | None,
        metrics_url: str | None,
        hooks: Iterable[CallHook] = (),
        compression: object = None,
        resolver: Resolver | None = None,
        resolve_interval: float = DEFAULT_RESOLVE_INTERVAL,
        max_connection_age: float | None = None,
        http_binary: object = "auto",
    ) -> ClientSettings:
        """Check the client's arguments (callers without type checking can pass anything)."""
        dns = parse_dns(url) if isinstance(url, str) else None
        endpoints = (dns.template,) if dns is not None else parse_urls(url)
        if resolver is not None and not callable(resolver):
            raise InvalidInputError(f"resolver must be callable, got {type(resolver).__name__}")
        interval = check_timeout(resolve_interval, "resolve_interval")
        if interval is None:
            raise InvalidInputError("resolve_interval must be a number of seconds, not None")
        if interval < SHORTEST_RESOLVE_INTERVAL:
            raise InvalidInputError(
                f"resolve_interval is at least {SHORTEST_RESOLVE_INTERVAL} s, got {interval!r}"
            )
        given: object = tls
        if given is not None and not isinstance(given, TLSConfig):
            raise InvalidInputError(f"tls must be a ts.TLSConfig, got {type(given).__name__}")
        if metrics_url is not None:
            check_metrics_url(metrics_url)
        if isinstance(hooks, CallHook) or not isinstance(hooks, Iterable):
            raise InvalidInputError("hooks takes an iterable of ts.CallHook (e.g. [hook])")
        checked_hooks = tuple(hooks)
        for hook in checked_hooks:
            if not isinstance(hook, CallHook):
                raise InvalidInputError(f"hooks must be ts.CallHook, got {type(hook).__name__}")
        if not (http_binary is True or http_binary is False or http_binary == "auto"):
            raise InvalidInputError(
                f'http_binary must be True, False or "auto", got {http_binary!r}'
            )
        if wanted():  # the triton_sdk logger is at DEBUG: log this client's calls
            checked_hooks += (LogCalls(),)
        return cls(
            endpoints=endpoints,
            dns=dns,
            resolver=resolve_addresses if resolver is None else resolver,
            resolve_interval=interval,
            max_connection_age=check_timeout(max_connection_age, "max_connection_age"),
            timeout=check_timeout(timeout),
            retry=check_retry(retry),
            headers=MappingProxyType(check_headers(headers)),
            tls=tls,
            metrics_url=metrics_url or default_metrics_url(endpoints[0]),
            hooks=checked_hooks,
            http_binary=http_binary,
            compression=check_compression(compression),
        )

    def options(
        self,
        timeout: Timeout,
        retry: RetryPolicy | NotGiven | None,
        headers: Mapping[str, str] | None,
    ) -> CallOptions:
        """One call's options: its own where given, the client's otherwise.

        The retry deadline starts now, so every request of the call shares it.
        """
        if timeout is NOT_GIVEN and retry is NOT_GIVEN and headers is None:
            defaults = self._defaults
            if defaults is not None:
                return defaults
        policy = self.retry if isinstance(retry, NotGiven) else check_retry(retry)
        return CallOptions(
            self.timeout if isinstance(timeout, NotGiven) else check_timeout(timeout),
            policy,
            self.headers
            if headers is None
            else MappingProxyType(merge_headers(self.headers, headers)),
            None if policy.deadline is None else time.monotonic() + policy.deadline,
        )


def check_tls_used(settings: ClientSettings, openai_url: str | None) -> None:
    """Refuse ``tls=`` that no URL of the client uses: certificate files given with
    ``grpc://``, ``http://`` or a bare ``host:port`` mean TLS was wanted, and the calls
    would go out in the clear (with their headers: a token)."""
    if settings.tls is None or settings.endpoint.tls:
        return
    if any(url.lower().startswith("https://") for url in (settings.metrics_url, openai_url or "")):
        return
    if settings.dns is not None:
        raise InvalidInputError(
            f"tls= was given, but {settings.dns} has no TLS form (dns:/// URLs are plain "
            "gRPC or HTTP): list the endpoints as grpcs:// or https:// URLs for TLS"
        )
    raise InvalidInputError(
        f"tls= was given, but {settings.endpoint} is not a TLS URL, and the calls would go "
        "out in the clear: use grpcs:// or https:// (or leave tls= out)"
    )


def parse_urls(urls: object) -> tuple[Endpoint, ...]:
    """One URL, or a list of URLs of one protocol (a client over many endpoints)."""
    if isinstance(urls, str):
        return (parse_url(urls),)
    if not isinstance(urls, Sequence) or isinstance(urls, bytes | bytearray) or not urls:
        raise InvalidInputError(
            f"url must be a URL string or a non-empty list of them, got {urls!r:.80}"
        )
    endpoints = tuple(parse_url(check_text(url, "url")) for url in urls)
    kinds = {(endpoint.protocol, endpoint.tls) for endpoint in endpoints}
    if len(kinds) > 1:
        shown = ", ".join(str(endpoint) for endpoint in endpoints)
        raise InvalidInputError(f"the URLs of one client must share one protocol, got {shown}")
    if len(set(endpoints)) < len(endpoints):
        raise InvalidInputError(f"the same endpoint is given twice in {list(map(str, endpoints))}")
    return endpoints


def with_suggestions(message: str, name: str, known: list[str]) -> str:
    """A model-not-found message with the names the repository has, the close ones first."""
    if name in known:  # the model is there: its version is not
        return message
    if not known:
        return f"{message}; the repository has no models"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ";"
    shown = ", ".join(map(repr, known[:20]))
    if len(known) > 20:
        shown += f" and {len(known) - 20} more"
    return f"{message}{hint} The repository has {shown}"


NO_RETRY: Final = RetryPolicy.none()


def check_retry(retry: object) -> RetryPolicy:
    """A retry policy; ``None`` is the policy that never retries (as ``timeout=None`` is
    no time limit)."""
    if retry is None:
        return NO_RETRY
    if not isinstance(retry, RetryPolicy):
        raise InvalidInputError(
            f"retry must be a ts.RetryPolicy, or None for no retries, got {type(retry).__name__}"
        )
    return retry


def merge_headers(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``extra`` on top; names compare case-insensitively (as HTTP's do)."""
    return check_header_size(overlay_headers(base, check_headers(extra)))


def default_metrics_url(endpoint: Endpoint) -> str:
    """Triton's default: the same host, port 8002."""
    return f"{'https' if endpoint.tls else 'http'}://{endpoint.authority_with_port(8002)}/metrics"


def client_repr(kind: str, settings: ClientSettings) -> str:
    # Headers are left out on purpose: they often carry credentials.
    if settings.dns is not None:
        return f"<{kind} {settings.dns}>"
    return f"<{kind} {' '.join(str(endpoint) for endpoint in settings.endpoints)}>"


def closed_error(kind: str) -> TritonError:
    return refused_before_sending(TritonError(f"this {kind} is closed"))


def start_wait_timed_out(model: str) -> TritonError:
    """The error of a sequence request whose timeout passed while it waited for the
    sequence's START request (another call's) to go out: nothing of it was sent."""
    return never_sent(
        TritonTimeoutError(
            "the request waited past its timeout for the sequence's START request (sent by "
            "another call) to go out; it was not sent",
            model=model,
        )
    )


def closed_while_retrying(what: str, last: TritonError, ran: bool) -> TritonError:
    """The error of a call whose client was closed while it waited to retry."""
    return TritonError(
        f"{what}: the client was closed while the call waited to retry; last failure: {last}",
        status=last.status,
        model=last.model,
        request_id=last.request_id,
        may_have_run=ran,
    )


def config_json(config: Mapping[str, object] | str | None) -> str | None:
    """A load_model config override as the JSON text the server expects."""
    if config is None or isinstance(config, str):
        return config
    if not isinstance(config, Mapping):
        raise InvalidInputError(
            f"config must be a mapping or its JSON text, got {type(config).__name__}"
        )
    try:
        return json.dumps(config, allow_nan=False)  # (NaN is no JSON: the server fails)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"config cannot be written as JSON: {exc}") from None


_NOT_FIELDS: Final = frozenset({"retry", "shared_memory", "outputs", "request_id"})
"""Options of other calls that no generate request means as a parameter (unlike
``top_k`` or ``priority``, which LLM backends take as fields)."""


def merge_fields(
    spec: ModelSpec, fields: Mapping[str, object] | None, named: Mapping[str, object]
) -> dict[str, object]:
    """generate's fields, given as one mapping and by keyword.

    A keyword named like an option of another call (``retry=`` on generate_stream, which
    is never retried) that is no input of the model is refused: it would otherwise go to
    the model as a request parameter of that name, unnoticed.
    """
    if fields is not None and not isinstance(fields, Mapping):
        raise InvalidInputError(f"fields are given by name, got {type(fields).__name__}")
    given: Iterable[object] = fields or ()  # (callers without type checking: any keys)
    unnamed = [name for name in given if not isinstance(name, str) or not name]
    if unnamed:
        raise InvalidInputError(
            f"field names are non-empty str, got {unnamed[0]!r}", model=spec.name
        )
    options = sorted(name for name in named if name in _NOT_FIELDS)
    options = [name for name in options if name not in spec.inputs]
    if options:
        shown = ", ".join(map(repr, options))
        raise InvalidInputError(
            f"this call takes no {shown} option (other calls do), and model {spec.name!r} "
            f"has no input of that name; to send a request parameter of that name, give it "
            f"in parameters={{...}}",
            model=spec.name,
        )
    if fields:
        both = fields.keys() & named.keys()
        if both:
            raise InvalidInputError(
                f"field {', '.join(map(repr, sorted(both)))} given both in the mapping and by "
                "keyword",
                model=spec.name,
            )
    return {**(fields or {}), **named}


def merge_inputs(
    inputs: Mapping[str, InputValue | None] | None, named: Mapping[str, InputValue | None]
) -> Mapping[str, InputValue | None]:
    if inputs is None:
        return named
    if not isinstance(inputs, Mapping):
        raise InvalidInputError(
            f"inputs are given by name (a mapping or keywords), got {type(inputs).__name__}"
        )
    if not named:
        return inputs
    both = inputs.keys() & named.keys()
    if both:
        raise InvalidInputError(
            f"input {', '.join(map(repr, sorted(both)))} given both in the mapping and by keyword"
        )
    return {**inputs, **named}


class ModelCore:
    """The half of a model handle that does no I/O: it turns a call into requests."""

    __slots__ = ("_adapter", "_checked_outputs", "_placement", "name", "spec", "version")

    def __init__(self, spec: ModelSpec, version: str | None) -> None:
        self.name: str = spec.name
        self.version: str | None = version or None  # ("": the server's policy picks)
        self.spec: ModelSpec = spec
        self._checked_outputs: dict[tuple[tuple[str, ...], int], tuple[RequestedOutput, ...]] = {}
        self._placement = PlacementPlan(spec)
        self._adapter: LLMAdapter | None = None

    # Chat and completions: everything decided before sending

    def __reduce__(self) -> NoReturn:
        # (copy.copy comes here too; without this the message named the client)
        raise TypeError(
            f"a model handle ({type(self).__name__}) cannot be pickled or copied: it uses its "
            "client's open connections; make a client in each process and take the "
            "handle there (client.model(name))"
        )

    def _llm(self, given: Adapter | None) -> LLMAdapter:
        if given is not None:
            return adapter_for(self.spec, given)
        if self._adapter is None:
            self._adapter = adapter_for(self.spec)
        return self._adapter

    def _chat_template(self, given: str | os.PathLike[str] | None) -> ChatTemplate:
        if given is not None:
            return load_chat_template(given)
        source = self.spec.parameters.get("chat_template")
        if source:  # Jinja source: a path in the config would name the server's files
            origin = f"the config of model {self.name!r}"
            return ChatTemplate({"default": source}, PLAIN_TOKENS, origin)
        raise ChatTemplateError(
            f"model {self.name!r} has no chat template, and chat never joins messages by "
            "guesswork: pass chat_template= (a Jinja template, or the path of a "
            "tokenizer_config.json or .jinja file), give the model one in its config.pbtxt "
            '(parameters { key: "chat_template" value: { string_value: "..." } }), or '
            "send a prompt you made with complete()",
            model=self.name,
        )

    def _chat_call(
        self,
        messages: Sequence[Message],
        chat_template: str | os.PathLike[str] | None,
        chat_template_kwargs: Mapping[str, object] | None,
        tools: Sequence[Mapping[str, object]] | None,
        adapter: Adapter | None,
        options: Mapping[str, SamplingValue],
        stream: bool,
    ) -> LLMCall:
        llm = self._llm(adapter)
        template = self._chat_template(chat_template)
        prompt = template.render(messages, tools=tools, variables=chat_template_kwargs)
        return LLMCall.plan(llm, prompt, options, stream=stream, prefix="chatcmpl")

    def _completion_call(
        self,
        prompt: str,
        adapter: Adapter | None,
        options: Mapping[str, SamplingValue],
        stream: bool,
    ) -> LLMCall:
        if not isinstance(prompt, str):
            raise InvalidInputError(
                f"the prompt must be a str, got {type(prompt).__name__}", model=self.name
            )
        return LLMCall.plan(self._llm(adapter), prompt, options, stream=stream, prefix="cmpl")

    def _outputs(
        self, outputs: Iterable[str] | None, class_count: int
    ) -> tuple[RequestedOutput, ...] | None:
        """Checked output requests, remembered: calls usually ask for the same outputs."""
        if outputs is None:
            return None
        if type(outputs) is list or type(outputs) is tuple:  # the usual: look it up first
            try:
                checked = self._checked_outputs.get((tuple(outputs), class_count))
            except TypeError:  # not names (unhashable): refused below
                checked = None
            if checked is not None:
                return checked
        key = (output_names(outputs), class_count)
        checked = self._checked_outputs.get(key)
        if checked is None:
            checked = check_outputs(self.spec, key[0], class_count)
            if len(self._checked_outputs) < 64:
                self._checked_outputs[key] = checked
        return checked

    def __repr__(self) -> str:
        version = "" if self.version is None else f" v{self.version}"
        return f"<{type(self).__name__} {self.name!r}{version}>"

    def _requests(
        self,
        inputs: Mapping[str, InputValue | None] | None,
        named: Mapping[str, InputValue | None],
        *,
        outputs: Iterable[str] | None,
        parameters: Mapping[str, ParameterInput] | None,
        priority: Priority,
        request_id: str,
        sample: bool,
        class_count: int = 0,
        sequence: SequenceFlags | None = None,
        streaming: bool = False,
    ) -> list[InferRequest]:
        """The requests of one call: one, or one per chunk of an oversized batch.

        Requests of a sequence or a stream are never split: their order and flags
        belong to one request.
        """
        if self.spec.sequence and (sequence is None or self.spec.decoupled):
            refusal = UnsupportedError if self.spec.decoupled else InvalidInputError
            raise refusal(stateful_message(self.spec), model=self.name)
        if self.spec.decoupled and not streaming:
            raise InvalidInputError(
                f"model {self.name!r} is decoupled (it may answer with any number of "
                "responses): use model.stream(...) or model.generate_stream(...)",
                model=self.name,
            )
        prepared = prepare_inputs(
            self.spec,
            named if inputs is None else merge_inputs(inputs, named),
            sample=sample,
            keywords=True if inputs is None else named.keys(),
        )
        # The checks of options left at their defaults are skipped: this runs on every call.
        if type(request_id) is not str or request_id:
            try:
                request_id = check_text(request_id, "request_id")
            except InvalidInputError as error:
                error.model = self.name
                raise
        if type(priority) is not int or priority:
            priority = check_priority(priority, self.name)
        if parameters is not None:
            parameters = check_parameters(parameters, self.name)
        request = InferRequest(
            model=self.name,
            version=self.version or "",
            inputs=prepared.tensors,
            outputs=self._outputs(outputs, class_count),
            request_id=request_id,
            parameters=parameters,
            priority=priority,
            sequence_id=sequence.sequence_id if sequence else 0,
            sequence_start=sequence.start if sequence else False,
            sequence_end=sequence.end if sequence else False,
            triton=self.spec.has_config,
        )
        if sequence is not None and prepared.batch_size is not None and prepared.batch_size > 1:
            # (Triton's sequence batcher refuses it, after the START it counts as sent)
            raise InvalidInputError(
                f"a request of a sequence carries one sample (the sequence batcher takes a "
                f"batch of 1), got a batch of {prepared.batch_size}",
                model=self.name,
            )
        limit = self.spec.max_batch_size
        if prepared.batch_size is None or prepared.batch_size <= limit:
            return [request]
        if streaming:
            raise InvalidInputError(
                f"a batch of {prepared.batch_size} is larger than {self.name!r} takes "
                f"({limit}); requests of a stream cannot be split",
                model=self.name,
            )
        return [
            attrs.evolve(request, inputs=chunk) for chunk in split_batch(prepared.tensors, limit)
        ]

    def _classification_output(self, output: str | None, top_k: int) -> tuple[str, int]:
        """The output to classify and the number of classes, checked."""
        top_k = check_int(top_k, "top_k", 1, 2**31 - 1)
        if not self.spec.has_config:
            # (MLServer and KServe ignore the request's class count, or fail on it)
            raise UnsupportedError(
                f"classify needs Triton's classification extension, which the server of "
                f"{self.name!r} (a server without model configs) lacks: call infer() and "
                "take the top classes of its output with numpy",
                model=self.name,
            )
        if output is not None:
            name = check_text(output, "output")
        elif len(self.spec.outputs) == 1:
            name = next(iter(self.spec.outputs))
        else:
            raise InvalidInputError(
                f"model {self.name!r} has several outputs: name the one to classify with "
                f"output=... (one of {', '.join(map(repr, self.spec.outputs))})",
                model=self.name,
            )
        tensor = self.spec.outputs.get(name)  # (an unknown name is refused with the others)
        if tensor is not None and tensor.datatype not in CLASSIFIABLE:
            # Triton refuses the other numeric types, and a BYTES output kills the server.
            raise InvalidInputError(
                f"output {name!r} of {self.name!r} is {tensor.datatype}: the server classifies "
                "integer, FP32 and FP64 outputs only; read it with infer() instead",
                model=self.name,
            )
        return name, top_k

    def _refuse_classifying_nothing(self, requests: Sequence[InferRequest], name: str) -> None:
        """Refuse to classify what no input fed: Triton's HTTP endpoint dies classifying an
        empty output (gRPC answers no classes)."""
        tensors = requests[0].inputs
        empty = [tensor.name for tensor in tensors if tensor.array.size == 0]
        if empty:
            # (An output is empty when an input it comes from is; which one, the model
            # knows: any empty input is refused.)
            raise InvalidInputError(
                f"input {empty[0]!r} of {self.name!r} is empty: output {name!r} may have "
                "nothing to classify (and Triton's HTTP endpoint crashes classifying an "
                "empty output)",
                model=self.name,
            )


class SequenceFlags(NamedTuple):
    """The sequence fields of one request."""

    sequence_id: int | str
    start: bool
    end: bool
