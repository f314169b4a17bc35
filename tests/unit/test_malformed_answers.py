"""Answers that break the protocol, from a server on a real loopback socket: every one
raises an InferenceError naming the call, never a raw KeyError or TypeError."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import attrs
import pytest

import triton_sdk as ts
from triton_sdk._transports._http_pool import header_length

from .._event_stream import serving
from ._both import resolve

METADATA = {
    "name": "m",
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "X", "datatype": "FP32", "shape": [1]}],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [1]}],
}
CONFIG = {"name": "m", "max_batch_size": 0}

# The answer to each path; a test puts what it needs here: JSON, or a Page as it is.
ANSWERS: dict[str, object] = {}


@attrs.frozen
class Page:
    content_type: str
    body: bytes
    delay: float = 0.0  # seconds before the head of the answer
    headers: tuple[tuple[str, str], ...] = ()
    status: int = 200


class Answering(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        answer = ANSWERS.get(self.path, {"error": "Not Found"})
        if not isinstance(answer, Page):
            answer = Page("application/json", json.dumps(answer).encode())
        body = answer.body
        time.sleep(answer.delay)
        self.send_response(answer.status if self.path in ANSWERS else 404)
        if answer.content_type:
            self.send_header("Content-Type", answer.content_type)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(Answering) as served:
        yield served


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest, url: str) -> AsyncIterator[Any]:
    ANSWERS.clear()
    ANSWERS.update({"/v2/models/m": METADATA, "/v2/models/m/config": CONFIG})
    kind = ts.Client if request.param == "sync" else ts.AsyncClient
    opened = kind(url, retry=ts.RetryPolicy(max_attempts=1))
    yield opened
    if isinstance(opened, ts.AsyncClient):
        await opened.aclose()
    else:
        opened.close()


@pytest.mark.parametrize(
    ("outputs", "cause"),
    [
        ([{"datatype": "FP32", "shape": [1], "data": [1.0]}], KeyError),  # no name
        ([{"name": "Y", "datatype": "FP32", "shape": None, "data": [1.0]}], TypeError),
        (None, TypeError),
    ],
)
async def test_an_infer_answer_that_breaks_the_protocol(
    client: Any, outputs: object, cause: type[Exception]
) -> None:
    ANSWERS["/v2/models/m/infer"] = {"model_name": "m", "outputs": outputs}
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="the server's answer to infer could not be read"):
        await resolve(model.infer(X=[1.0]))


async def test_an_inference_header_length_that_is_no_length_cannot_be_read(client: Any) -> None:
    # The blocking client read it as a connection failure of a request never answered.
    body = json.dumps({"model_name": "m", "outputs": []}).encode()
    length = (("Inference-Header-Content-Length", "zz"),)
    ANSWERS["/v2/models/m/infer"] = Page("application/json", body, headers=length)
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="could not be read: its Inference-Header"):
        await resolve(model.infer(X=[1.0]))
    # An error's status is read first: a full queue stays a full queue.
    full = json.dumps({"error": "Exceeds maximum queue size"}).encode()
    ANSWERS["/v2/models/m/infer"] = Page("application/json", full, headers=length, status=503)
    with pytest.raises(ts.ServerOverloadedError):
        await resolve(model.infer(X=[1.0], retry=None))


@pytest.mark.parametrize("given", ["-1", "1_0", "\u0663"])
def test_only_ascii_digits_are_a_header_length(given: str) -> None:
    with pytest.raises(ts.InferenceError, match="not a length"):
        header_length(given)


async def test_server_answers_without_a_name_cannot_be_read(client: Any) -> None:
    ANSWERS["/v2"] = {}
    with pytest.raises(ts.InferenceError, match="could not be read: KeyError: 'name'"):
        await resolve(client.server_metadata())
    ANSWERS["/v2/repository/index"] = [{}]
    with pytest.raises(ts.InferenceError, match="could not be read: KeyError: 'name'"):
        await resolve(client.models())


async def test_a_name_with_a_slash_on_a_server_without_the_operation_is_unsupported(
    client: Any,
) -> None:
    # Taken for a missing model (a '/' that uvicorn decodes) on every operation.
    with pytest.raises(ts.UnsupportedError, match="does not support load_model"):
        await resolve(client.load_model("a/b"))


async def test_metadata_that_breaks_the_protocol(client: Any) -> None:
    ANSWERS["/v2/models/m"] = {**METADATA, "inputs": [{"datatype": "FP32", "shape": [1]}]}
    with pytest.raises(ts.InferenceError, match="could not be read: KeyError") as info:
        await resolve(client.model("m"))
    assert isinstance(info.value.__cause__, KeyError)
    ANSWERS["/v2/models/m"] = {**METADATA, "inputs": [{**METADATA["inputs"][0], "datatype": "X"}]}  # type: ignore[index]
    with pytest.raises(ts.InferenceError, match="unknown Triton datatype 'X'"):
        await resolve(client.model("m"))


async def test_statistics_that_break_the_protocol(client: Any) -> None:
    ANSWERS["/v2/models/stats"] = [1]
    with pytest.raises(ts.InferenceError, match="could not be read"):
        await resolve(client.model_statistics())


@pytest.mark.parametrize(
    ("path", "call"),
    [
        ("/v2", lambda client: client.server_metadata()),
        ("/v2/repository/index", lambda client: client.models()),
        ("/v2/trace/setting", lambda client: client.trace_settings()),
        ("/v2/logging", lambda client: client.log_settings()),
        ("/v2/systemsharedmemory/status", lambda client: client.system_shared_memory_status()),
    ],
)
@pytest.mark.parametrize("body", [{"error": "boom"}, [], "x", [1]])
async def test_operations_answered_with_something_else_raise(
    client: Any, path: str, call: Any, body: object
) -> None:
    # A proxy's 200: a raw AttributeError escaped, or empty values came back (the
    # server metadata of a server named "").
    ANSWERS[path] = body
    expects_array = path.endswith(("index", "status"))
    if expects_array and body == []:
        assert await resolve(call(client)) == []  # (an empty repository, no regions)
        return
    error = "is an error: boom" if body == {"error": "boom"} else "could not be read"
    with pytest.raises(ts.InferenceError, match=error):
        await resolve(call(client))


async def test_statistics_answered_by_a_model_named_stats_are_unsupported(client: Any) -> None:
    # A server without the statistics extension read /v2/models/stats as the metadata
    # of its model "stats": model_statistics() returned [] (over gRPC, UnsupportedError).
    ANSWERS["/v2/models/stats"] = {**METADATA, "name": "stats"}
    with pytest.raises(ts.UnsupportedError, match="does not support model_statistics"):
        await resolve(client.model_statistics())
    ANSWERS["/v2/models/stats"] = {"error": "boom"}  # (a proxy's 200: it was [])
    with pytest.raises(ts.InferenceError, match="is an error: boom"):
        await resolve(client.model_statistics())
    ANSWERS["/v2/models/m/stats"] = {"error": "boom"}  # (one model's: it was [] too)
    with pytest.raises(ts.InferenceError, match="is an error: boom"):
        await resolve(client.model_statistics("m"))
    ANSWERS["/v2/models/m/stats"] = {}
    with pytest.raises(ts.InferenceError, match="could not be read"):
        await resolve(client.model_statistics("m"))


async def test_a_malformed_index_read_after_a_wait_is_named_not_raised(client: Any) -> None:
    # wait_until_ready(model=) read the index to say why: a raw KeyError escaped.
    ANSWERS["/v2/health/live"] = {}
    ANSWERS["/v2/health/ready"] = {}
    ANSWERS["/v2/repository/index"] = [{}]
    with pytest.raises(ts.TritonTimeoutError, match="its state could not be read"):
        await resolve(client.wait_until_ready(model="m", timeout=0.3))


async def test_a_max_batch_size_mistake_stays_an_invalid_input_error(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="needs a leading -1"):
        await resolve(client.model("m", max_batch_size=4))


@pytest.mark.parametrize(
    "page",
    [
        Page("text/html; charset=utf-8", b"<html><body>Sign in</body></html>"),
        Page("application/json", b'{"text_output": "not a stream"}'),
    ],
)
async def test_a_stream_answered_with_something_else_raises(client: Any, page: Page) -> None:
    # A proxy's page or a server that ignored Accept holds no events: not an empty stream.
    ANSWERS["/v2/models/m/generate_stream"] = page
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="not an event stream") as info:
        await resolve(model.generate_stream(X=1.0))
    assert page.content_type in str(info.value)
    assert repr(page.body[:20])[2:-1] in str(info.value)


async def test_a_stream_of_events_without_a_content_type_is_read(client: Any) -> None:
    ANSWERS["/v2/models/m/generate_stream"] = Page("", b'data: {"Y": 2.0}\n\n')
    model = await resolve(client.model("m"))
    assert await resolve(model.generate_stream(X=1.0)) == [{"Y": 2.0}]


class FailingHook(ts.CallHook):
    def __init__(self, call: str) -> None:
        self.call = call

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        if op.call == self.call:
            raise KeyError("the hook's own")


async def model_then_stream(client: Any) -> object:
    model = await resolve(client.model("m"))
    return await resolve(model.generate_stream(X=1.0))


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
@pytest.mark.parametrize("call", ["model_metadata", "generate_stream"])
async def test_a_failing_hook_is_not_blamed_on_the_answer(url: str, kind: Any, call: str) -> None:
    ANSWERS.clear()
    ANSWERS.update({"/v2/models/m": METADATA, "/v2/models/m/config": CONFIG})
    ANSWERS["/v2/models/m/generate_stream"] = Page("text/event-stream", b'data: {"Y": 2.0}\n\n')
    client = kind(url, hooks=[FailingHook(call)])
    try:
        with pytest.raises(KeyError, match="the hook's own"):
            await resolve(model_then_stream(client))
    finally:
        await resolve(client.aclose() if isinstance(client, ts.AsyncClient) else client.close())


def test_closing_a_stream_still_waiting_for_its_answer_from_another_thread(url: str) -> None:
    # A model slow to its first response: the stop must not wait for it.
    ANSWERS.clear()
    ANSWERS.update({"/v2/models/m": METADATA, "/v2/models/m/config": CONFIG})
    ANSWERS["/v2/models/m/generate_stream"] = Page(
        "text/event-stream", b'data: {"Y": 2.0}\n\n', delay=5.0
    )
    with ts.Client(url) as client:
        stream = client.model("m").generate_stream(X=1.0)
        outcome: list[object] = []
        reader = threading.Thread(target=lambda: outcome.append(list(stream)))
        reader.start()
        time.sleep(0.3)  # the request is out; its answer is 5 s away
        stopped_at = time.monotonic()
        stream.close()
        reader.join(3)
        assert not reader.is_alive(), "the reader still waits for the answer"
        assert time.monotonic() - stopped_at < 2
        assert outcome == [[]]


async def test_a_compressed_answer_the_client_did_not_ask_for_is_refused(client: Any) -> None:
    # The client asks for identity; a gzip answer was inflated all the same, with no
    # bound: 1 MiB of gzip made 1 GiB in memory.
    import gzip

    body = gzip.compress(json.dumps({"model_name": "m", "outputs": []}).encode())
    gzipped = (("Content-Encoding", "gzip"),)
    ANSWERS["/v2/models/m/infer"] = Page("application/json", body, headers=gzipped)
    model = await resolve(client.model("m"))
    with pytest.raises(
        ts.InferenceError, match=r"did not ask for: gzip \(Accept-Encoding: identity"
    ):
        await resolve(model.infer(X=[1.0]))
    # Asked for by the caller, it is read.
    accepted = await resolve(model.infer(X=[1.0], headers={"accept-encoding": "gzip"}))
    assert accepted.to_dict() == {}


async def test_json_nested_past_pythons_stack_cannot_be_read(client: Any) -> None:
    # A raw RecursionError came out of infer and of client.model().
    deep = b"[" * 100_000 + b"]" * 100_000
    ANSWERS["/v2/models/m/infer"] = Page("application/json", b'{"outputs":' + deep + b"}")
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="nested too deep"):
        await resolve(model.infer(X=[1.0]))
    ANSWERS["/v2/models/m"] = Page("application/json", b'{"name":"m","inputs":' + deep + b"}")
    with pytest.raises(ts.InferenceError, match="nested too deep"):
        await resolve(client.model("m"))


@pytest.mark.parametrize(
    "shape", [[3.0], [True, 3], [0, 2**62]], ids=["float", "bool", "too-large"]
)
async def test_an_output_shape_that_cannot_be_one_is_refused_at_the_call(
    client: Any, shape: list[Any]
) -> None:
    # Checked by size alone, it passed (3.0 * 4 bytes, 0 elements), and reading the
    # output raised numpy's TypeError or ValueError later.
    header = json.dumps(
        {
            "model_name": "m",
            "outputs": [
                {
                    "name": "Y",
                    "datatype": "FP32",
                    "shape": shape,
                    "parameters": {"binary_data_size": 12 if shape[-1] == 3 else 0},
                }
            ],
        }
    ).encode()
    data = b"\0" * (12 if shape[-1] == 3 else 0)
    length = (("Inference-Header-Content-Length", str(len(header))),)
    ANSWERS["/v2/models/m/infer"] = Page("application/octet-stream", header + data, headers=length)
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="output 'Y' with a shape"):
        await resolve(model.infer(X=[1.0]))


@pytest.mark.parametrize(
    ("metadata", "config", "said"),
    [
        ({"inputs": [{"name": "X", "datatype": "FP32", "shape": [2.5]}]}, {}, "2.5"),
        ({"inputs": [{"name": "X", "datatype": "FP32", "shape": [True]}]}, {}, "True"),
        ({}, {"max_batch_size": -3}, "max_batch_size -3"),
        ({}, {"max_batch_size": 2**70}, "max_batch_size"),
        ({}, {"model_transaction_policy": {"decoupled": "yes"}}, "decoupled is 'yes'"),
        (
            {
                "inputs": [
                    {"name": "X", "datatype": "FP32", "shape": [1]},
                    {"name": "X", "datatype": "INT8", "shape": [1]},
                ]
            },
            {},
            "two inputs named 'X'",
        ),
    ],
)
async def test_a_model_spec_the_server_cannot_mean_is_refused(
    client: Any, metadata: dict[str, Any], config: dict[str, Any], said: str
) -> None:
    # A shape of 2.5 was cut to 2, "yes" read as decoupled, -3 taken as a batch limit,
    # and of two inputs of one name the last one kept.
    ANSWERS["/v2/models/m"] = {**METADATA, **metadata}
    ANSWERS["/v2/models/m/config"] = {**CONFIG, **config}
    with pytest.raises(ts.InferenceError, match="could not be read") as refused:
        await resolve(client.model("m"))
    assert said in str(refused.value)


async def test_an_answer_with_two_outputs_of_one_name_is_refused(client: Any) -> None:
    # The last one was kept without a word (tritonclient's as_numpy takes the first).
    twice = [{"name": "Y", "datatype": "FP32", "shape": [1], "data": [v]} for v in (1.0, 2.0)]
    ANSWERS["/v2/models/m/infer"] = {"model_name": "m", "outputs": twice}
    model = await resolve(client.model("m"))
    with pytest.raises(ts.InferenceError, match="sent output 'Y' twice"):
        await resolve(model.infer(X=[1.0]))


async def test_an_answer_that_came_and_cannot_be_read_may_have_run(client: Any) -> None:
    # The model ran and answered; only reading the answer failed. may_have_run was False,
    # and code that checks it before sending again would run the model twice.
    model = await resolve(client.model("m"))
    ANSWERS["/v2/models/m/infer"] = Page("application/json", b"{not json")
    with pytest.raises(ts.InferenceError, match="not JSON") as failed:
        await resolve(model.infer(X=[1.0]))
    assert failed.value.may_have_run
    gzipped = (("Content-Encoding", "gzip"),)
    ANSWERS["/v2/models/m/infer"] = Page("application/json", b"\x1f\x8b", headers=gzipped)
    with pytest.raises(ts.InferenceError, match="did not ask for") as refused:
        await resolve(model.infer(X=[1.0]))
    assert refused.value.may_have_run


async def test_metrics_are_read_in_the_encoding_asked_for(client: Any, url: str) -> None:
    # asyncio's read took any encoding aiohttp knows, inflated without a bound; the
    # blocking one handed the compressed bytes on as text.
    import gzip

    text = b'# TYPE nv_inference_count counter\nnv_inference_count{model="m",version="1"} 2\n'
    gzipped = (("Content-Encoding", "gzip"),)
    ANSWERS["/metrics"] = Page("text/plain", gzip.compress(text), headers=gzipped)
    with pytest.raises(ts.InferenceError, match="did not ask for: gzip"):
        await resolve(client.metrics(url=f"{url}/metrics"))
    asked = await resolve(client.metrics(url=f"{url}/metrics", headers={"Accept-Encoding": "gzip"}))
    assert asked.model("m").inference_count == 2


def test_every_answer_that_cannot_be_read_may_have_run() -> None:
    # map took these for unrun batches and sent their samples again one by one.
    from triton_sdk._generate import loads_event
    from triton_sdk._transports._openai import _json

    unreadable_answers = [
        lambda: header_length("-1"),
        lambda: loads_event(b"{not json", "generate"),
        lambda: _json(b"{not json", "http://frontend", "m"),
        lambda: _json(b"[1]", "http://frontend", "m"),
    ]
    for read in unreadable_answers:
        with pytest.raises(ts.InferenceError) as failed:
            read()
        assert failed.value.may_have_run
