"""Bad arguments to public calls: refused as InvalidInputError before anything is sent.

Issue "Nothing but triton_sdk errors escape": every wrong type or value of a public
call's argument raises :class:`ts.InvalidInputError` (a :class:`ts.TritonError` and a
``ValueError``) naming the argument, on both clients, and nothing reaches the transport.
Runs on a :class:`MockTransport`, whose ``calls`` record everything that reached it.
"""

from __future__ import annotations

import asyncio
import math
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk.testing import MockTransport

from ._both import resolve

MODES = ("sync", "async")


def tensor(name: str, datatype: str, shape: tuple[int, ...]) -> ts.TensorSpec:
    return ts.TensorSpec(name=name, datatype=datatype, shape=shape)


# F: FP32 of any length, S: one BYTES element, I: one INT32, per sample; batches up to 8.
PROBE = ts.ModelSpec(
    name="probe",
    max_batch_size=8,
    inputs={
        "F": tensor("F", "FP32", (-1,)),
        "S": tensor("S", "BYTES", (1,)),
        "I": tensor("I", "INT32", (1,)),
    },
    outputs={"Y": tensor("Y", "FP32", (1,))},
)
# A stateful model with integer sequence ids (its CORRID control is TYPE_UINT64).
COUNTER = ts.ModelSpec(
    name="counter",
    max_batch_size=4,
    inputs={"X": tensor("X", "FP32", (1,))},
    outputs={"Y": tensor("Y", "FP32", (1,))},
    sequence=True,
    integer_sequence_ids=True,  # its CORRID control takes integers
)
MODELS = (PROBE, COUNTER)

# Valid inputs of PROBE: one sample, and a batch of one.
SAMPLE: dict[str, Any] = {"F": [1.0, 2.0], "S": "a", "I": 1}
BATCH: dict[str, Any] = {"F": [[1.0, 2.0]], "S": [["a"]], "I": [[1]]}


def answer(op: Any, ctx: ts.CallContext) -> object:
    """A server for MODELS: zeros of the right shape; classes "0.5:0" when asked for them."""
    if isinstance(op, ops.InferRequest):
        batch = op.inputs[0].array.shape[0] if op.inputs else 1
        if op.outputs and op.outputs[0].class_count:
            count = min(op.outputs[0].class_count, 3)
            return {op.outputs[0].name: np.array([["0.5:0"] * count] * batch, dtype=object)}
        return {"Y": np.zeros((batch, 1), np.float32)}
    raise NotImplementedError(op)


# One body for both clients (the pattern of test_shells.py)


async def close(thing: Any) -> None:
    closer = getattr(thing, "aclose", None) or thing.close
    await resolve(closer())


def client_kind(mode: str) -> Any:
    return ts.Client if mode == "sync" else ts.AsyncClient


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Env(NamedTuple):
    """A client on a MockTransport, its handles on MODELS, and how to make more clients."""

    kind: Any
    mock: MockTransport
    client: Any
    probe: Any
    counter: Any

    def new(self, url: object = "grpc://test", **options: Any) -> Any:
        """Another client of the same kind on the same mock (its arguments unchecked)."""
        return self.kind(url, transport=self.mock, **options)


@pytest.fixture
async def env(mode: str) -> AsyncIterator[Env]:
    mock = MockTransport(answer, models=MODELS)
    kind = client_kind(mode)
    client = kind("grpc://test", transport=mock)
    probe = await resolve(client.model("probe"))
    counter = await resolve(client.model("counter"))
    mock.calls.clear()
    yield Env(kind, mock, client, probe, counter)
    await close(client)


def broadcast(dtype: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """A stride-0 view: ``shape`` elements that take the memory of one."""
    return np.broadcast_to(np.zeros(1, dtype), shape)


# 1a. Every bad call of the issue: (the call, a word of the message naming the argument)

BadCall = Callable[[Env], object]

BAD_CALLS: dict[str, tuple[BadCall, str]] = {
    "lone surrogate in a BYTES str input": (
        lambda e: e.probe.infer_sample(**{**SAMPLE, "S": "\ud800"}),
        "'S'",
    ),
    "lone surrogate in a BYTES list input": (
        lambda e: e.probe.infer(F=[[1.0]] * 2, S=[["ok"], ["\udcff"]], I=[[1], [2]]),
        "'S'",
    ),
    "lone surrogate in request_id": (
        lambda e: e.probe.infer_sample(**SAMPLE, request_id="\ud800"),
        "request_id",
    ),
    "stride-0 view [1, 2**40] of float32": (
        lambda e: e.probe.infer(**{**BATCH, "F": broadcast(np.float32, (1, 2**40))}),
        "'F'",
    ),
    "stride-0 view [1, 2**58] of uint8": (
        lambda e: e.probe.infer(**{**BATCH, "F": broadcast(np.uint8, (1, 2**58))}),
        "'F'",
    ),
    "classify top_k='3'": (lambda e: e.probe.classify(**BATCH, top_k="3"), "top_k"),
    "timeout='5'": (lambda e: e.probe.infer(**BATCH, timeout="5"), "timeout"),
    "timeout=-1": (lambda e: e.probe.infer(**BATCH, timeout=-1), "timeout"),
    "timeout=nan": (lambda e: e.probe.infer(**BATCH, timeout=math.nan), "timeout"),
    "request_id=123": (lambda e: e.probe.infer(**BATCH, request_id=123), "request_id"),
    "headers=[('a', 'b')]": (
        lambda e: e.probe.infer(**BATCH, headers=[("a", "b")]),
        "headers",
    ),
    "retry=3 on infer": (lambda e: e.probe.infer(**BATCH, retry=3), "retry"),
    "retry=3 on the client": (lambda e: e.new(retry=3), "retry"),
    "timeout='5' on the client": (lambda e: e.new(timeout="5"), "timeout"),
    "headers=[('a', 'b')] on the client": (lambda e: e.new(headers=[("a", "b")]), "headers"),
    "a bytes URL": (lambda e: e.new(b"grpc://x"), "URL"),
    "tls={...}": (lambda e: e.new(tls={"ca_file": "ca.pem"}), "tls"),
    "float64 1e300 into FP32": (
        lambda e: e.probe.infer(**{**BATCH, "F": np.array([[1e300, 1.0]])}),
        "'F'",
    ),
    "bool array into FP32": (
        lambda e: e.probe.infer(**{**BATCH, "F": np.array([[True, False]])}),
        "'F'",
    ),
    "shape [2**40, 0]": (
        lambda e: e.probe.infer(**{**BATCH, "F": np.zeros((2**40, 0), np.float32)}),
        "'F'",
    ),
    "str sequence id on an integer-id model": (
        lambda e: e.counter.sequence("abc"),
        "sequence id",
    ),
    "client.model('')": (lambda e: e.client.model(""), "model name"),
    "client.model('a' * 10000)": (lambda e: e.client.model("a" * 10000), "model name"),
}


# More bad calls, found by the property test below (each of them once escaped as a raw
# TypeError, AttributeError, ValueError or MemoryError, or reached the transport).
MORE_BAD_CALLS: dict[str, tuple[BadCall, str]] = {
    "parameters=['a'] (a list)": (
        lambda e: e.probe.infer(**BATCH, parameters=["a"]),
        "parameters",
    ),
    "parameters='abc'": (lambda e: e.probe.infer(**BATCH, parameters="abc"), "parameters"),
    "parameters=np.array([1, 2])": (
        lambda e: e.probe.infer(**BATCH, parameters=np.array([1, 2])),
        "parameters",
    ),
    "a parameter value with a lone surrogate": (
        lambda e: e.probe.infer(**BATCH, parameters={"p": "\ud800"}),
        "parameter",
    ),
    "a parameter name with a lone surrogate": (
        lambda e: e.probe.infer(**BATCH, parameters={"\ud800": 1}),
        "parameter",
    ),
    "request_id=np.array([1, 2])": (
        lambda e: e.probe.infer(**BATCH, request_id=np.array([1, 2])),
        "request_id",
    ),
    "outputs=[['Y']] (names that are not str)": (
        lambda e: e.probe.infer(**BATCH, outputs=[["Y"]]),
        "output",
    ),
    "map outputs=[['Y']]": (lambda e: e.probe.map([SAMPLE], outputs=[["Y"]]), "output"),
    "map outputs=5": (lambda e: e.probe.map([SAMPLE], outputs=5), "output"),
    # Triton answers all outputs, over HTTP as JSON (no FP16, BF16, or non-UTF-8 BYTES).
    "outputs=[]": (lambda e: e.probe.infer(**BATCH, outputs=[]), "outputs is empty"),
    "map outputs=()": (lambda e: e.probe.map([SAMPLE], outputs=()), "outputs is empty"),
    "map(None)": (lambda e: e.probe.map(None), "samples"),
    "map(5)": (lambda e: e.probe.map(5), "samples"),
    "map(a 0-d array)": (lambda e: e.probe.map(np.array(None, dtype=object)), "samples"),
    "inputs mapping with int and str names": (
        lambda e: e.probe.infer({1: [1.0], "Z": [1.0]}),
        "input",
    ),
    "inputs given as a list": (lambda e: e.probe.infer([1.0, 2.0]), "input"),
    "a list of stride-0 views into FP32": (
        lambda e: e.probe.infer(**{**BATCH, "F": [broadcast(np.uint8, (1, 2**58))]}),
        "'F'",
    ),
    # An option of other calls lands among the inputs of a call without it.
    "shared_memory= on stream": (
        lambda e: e.probe.stream(**BATCH, shared_memory="off"),
        "this call takes no 'shared_memory' option",
    ),
    "retry= on stream (never retried)": (
        lambda e: e.probe.stream(**BATCH, retry=None),
        "this call takes no 'retry' option",
    ),
    "shared_memory= on classify": (
        lambda e: e.probe.classify(**BATCH, shared_memory="off"),
        "this call takes no 'shared_memory' option",
    ),
    # generate's fields that are no input are request parameters: an option of other calls
    # would go as one, unnoticed.
    "retry= on generate_stream (never retried)": (
        lambda e: e.probe.generate_stream(**SAMPLE, retry=3),
        "this call takes no 'retry' option (other calls do), and model 'probe' has no input of "
        "that name; to send a request parameter of that name, give it in parameters=",
    ),
    "shared_memory= on generate": (
        lambda e: e.probe.generate(**SAMPLE, shared_memory="off"),
        "this call takes no 'shared_memory' option",
    ),
    "a field both in the mapping and by keyword": (
        lambda e: e.probe.generate({"F": [1.0, 2.0], "S": "a"}, F=[1.0, 2.0], I=1),
        "field 'F' given both in the mapping and by keyword",
    ),
    # Digits that are no ASCII digits, and versions past the server's 64-bit ints.
    "version U+00B2 (superscript two)": (
        lambda e: e.client.model("probe", "\u00b2"),
        "version must be a str of digits",
    ),
    "version U+0661 (Arabic-Indic one)": (
        lambda e: e.client.model("probe", "\u0661"),
        "version must be a str of digits",
    ),
    "version of 5000 digits": (lambda e: e.client.model("probe", "9" * 5000), "at most"),
    "version 2**63": (lambda e: e.client.model("probe", str(2**63)), "at most 9223372036854775807"),
    # An option of the call put among its inputs: not "this call takes no ... option".
    "timeout in the inputs mapping": (
        lambda e: e.probe.infer({**BATCH, "timeout": 5}),
        "'timeout': an option, not an input; give it to the call as a keyword argument",
    ),
    "retry in a stream's inputs mapping, shared_memory by keyword": (
        lambda e: e.probe.stream({**BATCH, "retry": None}, shared_memory="off"),
        "its inputs are 'F', 'S', 'I' ('retry': an option, not an input; give it to the call "
        "as a keyword argument, not among the inputs; this call takes no 'shared_memory' option)",
    ),
    "timeout in a sample of map": (
        lambda e: e.probe.map([{**SAMPLE, "timeout": 5}]),
        "'timeout': an option, not an input",
    ),
    # (Over HTTP the path step reached another endpoint: server-wide trace settings.)
    "update_trace_settings('..')": (
        lambda e: e.client.update_trace_settings("..", rate=7),
        "model name '..' names no model",
    ),
    # (The server answered only "failed to poll from model repository".)
    "load_model config NaN": (
        lambda e: e.client.load_model("probe", config='{"max_batch_size": NaN}'),
        "NaN is no JSON value",
    ),
    "load_model config [1, 2]": (
        lambda e: e.client.load_model("probe", config="[1, 2]"),
        "config must be a JSON object",
    ),
    "load_model config {'a': nan}": (
        lambda e: e.client.load_model("probe", config={"a": math.nan}),
        "config cannot be written as JSON",
    ),
    "model_statistics('.')": (lambda e: e.client.model_statistics("."), "'.' names no model"),
    "unload_model('..')": (lambda e: e.client.unload_model(".."), "'..' names no model"),
    "a list of stride-0 views into BYTES": (
        lambda e: e.probe.infer(**{**BATCH, "S": [broadcast(np.uint8, (1, 2**58))]}),
        "'S'",
    ),
}


@pytest.mark.parametrize("case", [*BAD_CALLS, *MORE_BAD_CALLS])
async def test_a_bad_argument_is_refused_naming_it_and_nothing_is_sent(env: Env, case: str) -> None:
    call, named = BAD_CALLS.get(case) or MORE_BAD_CALLS[case]
    with pytest.raises(ts.InvalidInputError) as caught:
        await resolve(call(env))
    error = caught.value
    assert isinstance(error, ts.TritonError)
    assert isinstance(error, ValueError)
    assert named.lower() in str(error).lower(), str(error)
    assert env.mock.calls == []


@pytest.mark.parametrize("request_id", ["a\x00b", "\ud800"])
async def test_a_request_id_refused_names_the_model(env: Env, request_id: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="request_id") as caught:
        await resolve(env.probe.infer_sample(**SAMPLE, request_id=request_id))
    assert caught.value.model == "probe"


# Credentials in a URL: refused, never echoed, pointing to headers=

SECRET_URLS = {
    "user:password@": ("grpc://user:s3cr3t-PW@127.0.0.1:8001", "s3cr3t-PW"),
    "user:password@ on HTTP": ("http://user:s3cr3t-PW@127.0.0.1:8000", "s3cr3t-PW"),
    "user:password@ and a bad port": ("http://u:s3cr3t-PW@127.0.0.1:99999", "s3cr3t-PW"),
    "?token=": ("http://127.0.0.1:8000/?token=T0KEN-SECRET", "T0KEN-SECRET"),
    "?token= on gRPC": ("grpc://127.0.0.1:8001?token=T0KEN-SECRET", "T0KEN-SECRET"),
}


def every_text_of(error: BaseException) -> list[str]:
    """What a user or a log may show of an error: str, repr, attributes, traceback."""
    texts = [str(error), repr(error), repr(vars(error))]
    texts += traceback.format_exception(error)
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:  # the cause/context chain
        seen.add(id(link))
        texts += [str(link), repr(link), repr(vars(link)), repr(link.args)]
        link = link.__cause__ or link.__context__
    return texts


@pytest.mark.parametrize("case", SECRET_URLS)
async def test_credentials_in_the_url_are_refused_and_never_shown(env: Env, case: str) -> None:
    url, secret = SECRET_URLS[case]
    with pytest.raises(ts.InvalidInputError) as caught:
        env.new(url)
    error = caught.value
    for text in every_text_of(error):
        assert secret not in text
    assert "headers" in str(error), str(error)
    assert env.mock.calls == []


@pytest.mark.parametrize("version", ["", None])
async def test_a_handle_without_a_version_has_version_none(env: Env, version: str | None) -> None:
    model = await resolve(env.client.model("probe", version))
    assert model.version is None
    assert repr(model).endswith(" 'probe'>")


# 1b. An endless timeout means no limit


@pytest.mark.parametrize("timeout", [math.inf, 1e12, 1e9, 10**9, 10**400])
async def test_an_endless_timeout_per_call_is_no_limit(env: Env, timeout: float) -> None:
    await resolve(env.probe.infer(**BATCH, timeout=timeout))
    await resolve(env.probe.infer_sample(**SAMPLE, timeout=timeout))
    await resolve(env.client.is_live(timeout=timeout))
    assert [call.ctx.timeout for call in env.mock.calls] == [None, None, None]


@pytest.mark.parametrize("timeout", [math.inf, 1e12, 10**400])
async def test_an_endless_timeout_on_the_client_is_no_limit(env: Env, timeout: float) -> None:
    client = env.new(timeout=timeout)
    try:
        model = await resolve(client.model("probe"))
        await resolve(model.infer(**BATCH))
        await resolve(model.infer(**BATCH, timeout=2.0))
    finally:
        await close(client)
    timeouts = [call.ctx.timeout for call in env.mock.calls]
    assert timeouts[:-1] == [None] * (len(timeouts) - 1)
    assert timeouts[-1] == 2.0


async def test_a_finite_timeout_just_below_no_limit_is_kept(env: Env) -> None:
    await resolve(env.probe.infer(**BATCH, timeout=9.9e8))
    assert [call.ctx.timeout for call in env.mock.calls] == [9.9e8]


async def test_numpy_numbers_are_taken_where_numbers_are(env: Env) -> None:
    # A value computed with numpy: np.float32(2.5) seconds, np.int64(2) classes.
    await resolve(env.probe.infer(**BATCH, timeout=np.float32(2.5)))
    classes = await resolve(env.probe.classify(**BATCH, top_k=np.int64(2), output="Y"))
    assert [len(sample) for sample in classes] == [2]
    results = env.probe.map([SAMPLE] * 3, batch_size=np.int32(2), concurrency=np.int64(2))
    assert len(await resolve(results)) == 3
    timeouts = [call.ctx.timeout for call in env.mock.calls]
    assert timeouts[0] == 2.5
    assert type(timeouts[0]) is float
    with pytest.raises(ts.InvalidInputError, match="top_k must be >= 1"):
        await resolve(env.probe.classify(**BATCH, top_k=np.int64(0), output="Y"))
    with pytest.raises(ts.InvalidInputError, match="top_k must be an int, got bool"):
        await resolve(env.probe.classify(**BATCH, top_k=np.bool_(True), output="Y"))
    await resolve(env.probe.infer(**BATCH, priority=np.uint64(2)))
    assert env.mock.calls[-1].op.priority == 2


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.probe.infer(**BATCH, timeout=np.timedelta64(500, "ms")),
        lambda e: e.probe.classify(**BATCH, top_k=np.timedelta64(3), output="Y"),
        lambda e: e.probe.infer(**BATCH, priority=np.timedelta64(1)),
        lambda e: e.probe.infer(**BATCH, parameters={"p": np.timedelta64(1)}),
    ],
)
async def test_a_timedelta64_is_no_number(env: Env, call: Callable[[Env], object]) -> None:
    # numpy counts it among its integers, but it counts some unit: 500 ms is not 500 s.
    with pytest.raises(ts.InvalidInputError, match="timedelta64"):
        await resolve(call(env))
    assert env.mock.calls == []


# 1c. Property: whatever the arguments, a TritonError or a result; refused means not sent

BIG_INTS = st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 2**100, -(2**100)])
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)
DTYPES = st.one_of(
    hnp.scalar_dtypes(),
    hnp.byte_string_dtypes(max_len=4),
    hnp.unicode_string_dtypes(max_len=4),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    BIG_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    ANY_TEXT,
    st.sampled_from(["\ud800", "a\udcffb", ""]),
    st.binary(max_size=6),
)
ARRAYS = st.one_of(
    hnp.arrays(DTYPES, SHAPES),
    hnp.arrays(np.dtype(object), SHAPES, elements=SCALARS),
    st.builds(
        broadcast,
        st.sampled_from([np.float32, np.uint8, np.int64, np.float64, np.bool_]),
        st.tuples(st.just(1), st.sampled_from([2**20, 2**58])),
    ),
)
ANYTHING = st.recursive(
    st.one_of(SCALARS, ARRAYS),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.one_of(ANY_TEXT, st.integers()), children, max_size=3),
    ),
    max_leaves=6,
)

MISSING = object()

GOOD_OPTIONS: dict[str, st.SearchStrategy[Any]] = {
    "timeout": st.one_of(st.none(), st.floats(0.5, 30), st.just(math.inf)),
    "request_id": st.text(alphabet="abc-123", max_size=8),
    "priority": st.integers(0, 3),
    "parameters": st.just({"p": 1, "q": "x"}),
    "outputs": st.just(["Y"]),
    "headers": st.just({"x-a": "b"}),
    "retry": st.just(ts.RetryPolicy.none()),
    "top_k": st.integers(1, 3),
    "batch_size": st.integers(1, 8),
    "concurrency": st.integers(1, 4),
}

# The keyword options each method takes.
METHOD_OPTIONS = {
    "infer": ("timeout", "request_id", "priority", "parameters", "outputs", "headers", "retry"),
    "infer_sample": (
        "timeout",
        "request_id",
        "priority",
        "parameters",
        "outputs",
        "headers",
        "retry",
    ),
    "classify": ("timeout", "request_id", "priority", "parameters", "headers", "retry", "top_k"),
    "map": ("timeout", "outputs", "headers", "retry", "batch_size", "concurrency"),
}


def good_inputs(batch: int, length: int, sample: bool) -> dict[str, Any]:
    if sample:
        return {"F": [0.5] * length, "S": "text", "I": 7}
    return {
        "F": np.ones((batch, length), np.float32),
        "S": [["text"]] * batch,
        "I": [[7]] * batch,
    }


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any], Any]:
    """(method, inputs, options, samples for map): each value good, arbitrary or left out."""
    method = draw(st.sampled_from(sorted(METHOD_OPTIONS)))
    sample = method in ("infer_sample", "map")
    good = good_inputs(draw(st.integers(1, 3)), draw(st.integers(0, 3)), sample)
    inputs: dict[str, Any] = {}
    for name in ("F", "S", "I"):
        value = draw(st.one_of(st.just(good[name]), ANYTHING, st.just(MISSING)))
        if value is not MISSING:
            inputs[name] = value
    options: dict[str, Any] = {}
    for name in METHOD_OPTIONS[method]:
        choice = draw(st.sampled_from(["left out", "left out", "good", "anything"]))
        if choice == "good":
            options[name] = draw(GOOD_OPTIONS[name])
        elif choice == "anything":
            options[name] = draw(ANYTHING)
    samples = draw(st.one_of(st.just([inputs]), st.just([inputs]), ANYTHING))
    if method != "map" and draw(st.integers(0, 3)) == 0:
        # Inputs as the positional mapping (or as anything at all) instead of keywords.
        options["inputs"] = draw(st.one_of(st.just(inputs), ANYTHING))
        inputs = {}
    return method, inputs, options, samples


def invoke(
    model: Any, method: str, inputs: dict[str, Any], options: dict[str, Any], samples: Any
) -> Any:
    if method == "map":
        return model.map(samples, **options)
    options = dict(options)
    positional = (options.pop("inputs"),) if "inputs" in options else ()
    return getattr(model, method)(*positional, **inputs, **options)


def check_outcome(mock: MockTransport, run: Callable[[], object]) -> None:
    """The property: a result or a TritonError; an InvalidInputError sent nothing."""
    try:
        run()
    except ts.InvalidInputError:
        assert mock.calls == [], "refused with InvalidInputError after reaching the transport"
    except ts.TritonError:
        pass


def sync_case(method: str, inputs: dict[str, Any], options: dict[str, Any], samples: Any) -> None:
    mock = MockTransport(answer, models=MODELS)
    with ts.Client("grpc://test", transport=mock) as client:
        model = client.model("probe")
        mock.calls.clear()
        check_outcome(mock, lambda: list_if_map(invoke(model, method, inputs, options, samples)))


def list_if_map(value: Any) -> Any:
    return list(value) if isinstance(value, Iterator) else value


def async_case(method: str, inputs: dict[str, Any], options: dict[str, Any], samples: Any) -> None:
    mock = MockTransport(answer, models=MODELS)

    async def main() -> None:
        client = ts.AsyncClient("grpc://test", transport=mock)
        try:
            model = await client.model("probe")
            mock.calls.clear()
            failure: BaseException | None = None
            try:
                await resolve(invoke(model, method, inputs, options, samples))
            except BaseException as error:  # judged outside the loop, like the sync case
                failure = error

            def rerun() -> None:
                if failure is not None:
                    raise failure

            check_outcome(mock, rerun)
        finally:
            await client.aclose()

    asyncio.run(main())


PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY_SETTINGS
@given(calls())
def test_any_arguments_give_a_result_or_a_triton_error_sync(
    case: tuple[str, dict[str, Any], dict[str, Any], Any],
) -> None:
    sync_case(*case)


@PROPERTY_SETTINGS
@given(calls())
def test_any_arguments_give_a_result_or_a_triton_error_async(
    case: tuple[str, dict[str, Any], dict[str, Any], Any],
) -> None:
    async_case(*case)


async def test_map_collects_an_answer_that_cannot_be_split_into_rows(mode: str) -> None:
    """errors="collect" carries on past a batch whose answer has the wrong number of rows
    (it raised, ending the map): its samples get that error. They are not sent again: the
    model ran them (they ran twice, and the broken answer was hidden)."""

    def one_row(op: Any, ctx: ts.CallContext) -> object:
        if isinstance(op, ops.InferRequest):
            return {"Y": np.zeros((1, 1), np.float32)}  # whatever the batch
        raise NotImplementedError(op)

    mock = MockTransport(one_row, models=MODELS)
    client = client_kind(mode)("grpc://test", transport=mock)
    try:
        probe = await resolve(client.model("probe"))
        outcomes = await resolve(probe.map([SAMPLE] * 4, batch_size=4, errors="collect"))
    finally:
        await close(client)
    assert [type(outcome) for outcome in outcomes] == [ts.InferenceError] * 4
    assert all(outcome.may_have_run for outcome in outcomes)
    assert "should have 4 along its first axis" in str(outcomes[0])
    sent = [call.op for call in mock.calls if isinstance(call.op, ops.InferRequest)]
    assert [op.inputs[0].array.shape[0] for op in sent] == [4]


def test_refused_numpy_scalars_are_shown_as_their_values() -> None:
    # numpy 2 wrote them as np.int64(-1), np.float64(nan), np.True_ in the messages.
    from triton_sdk._checks import check_timeout
    from triton_sdk._concurrency import Gate
    from triton_sdk._operations import _setting_int
    from triton_sdk._request import check_priority
    from triton_sdk._sequence import SequenceState

    with pytest.raises(ts.InvalidInputError, match=r"got -1$"):
        check_priority(np.int64(-1), "m")
    with pytest.raises(ts.InvalidInputError, match=r"got True$"):
        check_priority(np.True_, "m")  # type: ignore[arg-type]
    with pytest.raises(ts.InvalidInputError, match=r"got nan$"):
        check_timeout(np.float64("nan"))
    with pytest.raises(ts.InvalidInputError, match=r"got the float64 1\.5$"):
        _setting_int("rate", np.float64(1.5), 0, 10)
    spec = ts.ModelSpec(name="acc", inputs={}, outputs={}, sequence=True)
    with pytest.raises(ts.InvalidInputError, match=r"got 3\.0$"):
        SequenceState(spec, np.float64(3.0), Gate)  # type: ignore[arg-type]
