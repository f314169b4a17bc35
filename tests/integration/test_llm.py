"""LLM chat and completions against the real server, on all four transports.

The llm_* models (tests/models) have the vLLM, TensorRT-LLM ensemble and LLM-API
backends' exact inputs and outputs and answer deterministically (_fake_llm/fake_llm.py):
token 0 of a completion is "P" + sha256(prompt)[:8], so a text proves which prompt the
model received, then " alpha", " bravo", ... up to 8 tokens ("stop") or max_tokens
("length"). OpenAI-route tests run against tests/integration/openai_standin.py, which
serves the shapes of Triton's OpenAI-compatible frontend over the same server.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai.types
import openai.types.chat
import pytest

import triton_sdk as ts
from triton_sdk.llm import custom
from triton_sdk.local import LocalServer

from .conftest import inference_count
from .openai_standin import OpenAIStandIn

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content + eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
PROMPT = "<|system|>Be brief.\n<|user|>Hi there\n<|assistant|>"  # TEMPLATE on MESSAGES, by hand
STORY = "Once upon a time"

LLMS = ["llm_vllm", "llm_trtllm", "llm_llmapi"]
COUNTS = {"llm_vllm", "llm_trtllm"}  # the models that report token counts
VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
VOCAB += ["golf", "hotel", "india", "juliett", "kilo", "lima"]


def expected(
    prompt: str, *, max_tokens: int = 16, choice: int = 0, stop: str | None = None
) -> tuple[str, str, int]:
    """(text, finish reason, completion tokens) of the fake LLM for ``prompt``."""
    count = min(max_tokens, 8)
    pieces = ["P" + hashlib.sha256(prompt.encode()).hexdigest()[:8]]
    pieces += [" " + VOCAB[(k - 1 + choice) % len(VOCAB)] for k in range(1, count)]
    text = "".join(pieces)
    if stop is not None and stop in text:
        cut = text.index(stop)
        tokens = sum(1 for start in _starts(pieces) if start < cut)
        return text[:cut], "stop", tokens
    return text, "length" if count < 8 else "stop", count


def _starts(pieces: list[str]) -> Iterator[int]:
    start = 0
    for piece in pieces:
        yield start
        start += len(piece)


def close(stream: Any) -> None:
    """Stop reading a stream (a ResponseStream, or the blocking view of an async one)."""
    stream.close()


# Chat and completions on every backend's schema


@pytest.mark.parametrize("name", LLMS)
def test_chat_sends_the_rendered_prompt_and_answers_without_it(client: Any, name: str) -> None:
    answer = client.model(name).chat(MESSAGES, chat_template=TEMPLATE, max_tokens=16)
    text, finish, tokens = expected(PROMPT)
    assert isinstance(answer, ts.ChatCompletion)
    assert answer.text == text
    assert answer.choices[0].message.content == text
    assert answer.choices[0].message.role == "assistant"
    assert answer.finish_reason == finish == "stop"
    assert answer.model == name
    if name in COUNTS:
        assert answer.usage == ts.Usage(len(PROMPT.split()), tokens)
        assert answer.usage.total_tokens == len(PROMPT.split()) + tokens
    else:  # the LLM-API model reports no token counts
        assert answer.usage is None
    openai.types.chat.ChatCompletion.model_validate(answer.to_openai_dict())


@pytest.mark.parametrize("name", LLMS)
def test_max_tokens_ends_the_text_with_length(client: Any, name: str) -> None:
    answer = client.model(name).complete(STORY, max_tokens=3)
    text, _, _ = expected(STORY, max_tokens=3)
    assert isinstance(answer, ts.Completion)
    assert (answer.text, answer.finish_reason) == (text, "length")
    if name in COUNTS:
        assert answer.usage == ts.Usage(4, 3)
    openai.types.Completion.model_validate(answer.to_openai_dict())


@pytest.mark.parametrize("name", LLMS)
def test_a_stop_string_cuts_the_text(client: Any, name: str) -> None:
    answer = client.model(name).complete(STORY, max_tokens=16, stop=[" charlie", "zulu"])
    text, _, tokens = expected(STORY, stop=" charlie")
    assert answer.text == text
    assert text.endswith(" bravo")
    assert answer.finish_reason == "stop"
    if name in COUNTS:
        assert answer.usage.completion_tokens == tokens


@pytest.mark.parametrize("name", ["llm_vllm", "llm_trtllm"])
def test_n_choices_where_the_backend_allows_them(client: Any, name: str) -> None:
    answer = client.model(name).chat(MESSAGES, chat_template=TEMPLATE, max_tokens=16, n=2)
    assert [choice.index for choice in answer.choices] == [0, 1]
    assert [choice.message.content for choice in answer.choices] == [
        expected(PROMPT, choice=0)[0],
        expected(PROMPT, choice=1)[0],
    ]
    assert answer.usage.completion_tokens == 16


def test_n_is_refused_where_the_backend_gives_one_choice(client: Any, server: LocalServer) -> None:
    model = client.model("llm_llmapi")
    before = inference_count(server, "llm_llmapi")
    with pytest.raises(ts.UnsupportedError, match="n=2 is not supported"):
        model.complete(STORY, n=2)
    assert inference_count(server, "llm_llmapi") == before


# Streams


@pytest.mark.parametrize("name", LLMS)
def test_chat_stream_invariants(client: Any, name: str) -> None:
    model = client.model(name)
    chunks = list(model.chat_stream(MESSAGES, chat_template=TEMPLATE, max_tokens=16))
    whole = model.chat(MESSAGES, chat_template=TEMPLATE, max_tokens=16)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(chunk.choices[0].delta.role is None for chunk in chunks[1:] if chunk.choices)
    assert [chunk.finish_reason for chunk in chunks if chunk.finish_reason] == ["stop"]
    assert "".join(chunk.text for chunk in chunks) == whole.text
    assert len(chunks) > 3  # token by token, not one piece
    if name in COUNTS:
        assert chunks[-1].usage == whole.usage
        assert chunks[-1].choices == ()
        assert all(chunk.usage is None for chunk in chunks[:-1])
    for chunk in chunks:
        openai.types.chat.ChatCompletionChunk.model_validate(chunk.to_openai_dict())


@pytest.mark.parametrize("name", LLMS)
def test_complete_stream_joins_to_the_completion(client: Any, name: str) -> None:
    model = client.model(name)
    chunks = list(model.complete_stream(STORY, max_tokens=5))
    assert "".join(chunk.text for chunk in chunks) == expected(STORY, max_tokens=5)[0]
    assert [chunk.finish_reason for chunk in chunks if chunk.finish_reason] == ["length"]
    if name in COUNTS:
        assert chunks[-1].usage == ts.Usage(4, 5)


def test_a_stream_of_two_choices(client: Any) -> None:
    chunks = list(
        client.model("llm_vllm").chat_stream(MESSAGES, chat_template=TEMPLATE, max_tokens=4, n=2)
    )
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert mine[0].delta.role == "assistant"
        assert (
            "".join(c.delta.content or "" for c in mine)
            == expected(PROMPT, max_tokens=4, choice=index)[0]
        )
        assert [c.finish_reason for c in mine if c.finish_reason] == ["length"]
    assert chunks[-1].usage == ts.Usage(len(PROMPT.split()), 8)


def test_breaking_out_of_a_stream_cancels_the_request(client: Any, protocol: str) -> None:
    # One model instance: a request still generating (2000 tokens, 10 s) would hold it.
    model = client.model("llm_vllm")
    stream = model.complete_stream("tell a story forever", max_tokens=2000)
    received = [next(stream), next(stream)]
    close(stream)
    assert received[0].text.startswith("P")
    started = time.monotonic()
    answer = model.complete(STORY, max_tokens=2, timeout=5)
    assert answer.text == expected(STORY, max_tokens=2)[0]
    assert time.monotonic() - started < 5


def assert_cut(chunks: list[ts.CompletionChunk]) -> None:
    """Chunks of a generation cut mid-way: no finish reason or usage made up for it."""
    assert len(chunks) > 1
    assert [c.finish_reason for chunk in chunks for c in chunk.choices] == [None] * len(chunks)
    assert [chunk.usage for chunk in chunks] == [None] * len(chunks)


@pytest.mark.parametrize("name", LLMS)
def test_a_stream_closed_from_another_thread_infers_no_finish(url: str, name: str) -> None:
    with ts.Client(url) as client:
        stream = client.model(name).complete_stream("tell a story forever", max_tokens=2000)
        chunks = [next(stream)]
        closer = threading.Timer(0.3, stream.close)
        closer.start()
        chunks += list(stream)  # the reader's loop ends when closed
        closer.join()
    assert_cut(chunks)


@pytest.mark.parametrize("name", LLMS)
def test_a_stream_closed_from_another_task_infers_no_finish(url: str, name: str) -> None:
    async def main() -> list[ts.CompletionChunk]:
        async with ts.AsyncClient(url) as client:
            model = await client.model(name)
            stream = model.complete_stream("tell a story forever", max_tokens=2000)
            chunks = [await anext(stream)]

            async def closer() -> None:
                await asyncio.sleep(0.3)
                await stream.aclose()

            closing = asyncio.create_task(closer())
            chunks += [chunk async for chunk in stream]
            await closing
            return chunks

    assert_cut(asyncio.run(main()))


def test_a_plain_break_cancels_the_request(url: str) -> None:
    # No close(): the loop drops the stream, and with it the request.
    with ts.Client(url) as client:
        model = client.model("llm_vllm")
        for chunk in model.chat_stream(MESSAGES, max_tokens=2000, chat_template="{{ 'forever' }}"):
            if chunk.text:
                break
        started = time.monotonic()
        assert model.complete(STORY, max_tokens=2, timeout=5).finish_reason == "length"
        assert time.monotonic() - started < 5


def test_leaving_async_with_cancels_the_request(url: str) -> None:
    async def main() -> float:
        async with ts.AsyncClient(url) as client:
            model = await client.model("llm_vllm")
            async with model.complete_stream("forever", max_tokens=2000) as stream:
                async for chunk in stream:
                    if chunk.text:
                        break
            started = time.monotonic()
            await model.complete(STORY, max_tokens=2, timeout=5)
            return time.monotonic() - started

    assert asyncio.run(main()) < 5


def test_an_error_mid_stream_is_raised_during_the_iteration(client: Any) -> None:
    stream = client.model("llm_vllm").complete_stream("please explode", max_tokens=16)
    assert next(stream).text.startswith("P")  # the text before the failure came
    with pytest.raises(ts.InferenceError, match="the model exploded"):
        list(stream)


# The echo rule


def test_the_prompt_is_never_in_the_answer_though_the_model_echoes_by_default(
    client: Any,
) -> None:
    model = client.model("llm_vllm")
    raw = model.generate(text_input=STORY)  # vLLM's default: the prompt, then the text
    assert raw["text_output"] == STORY + expected(STORY)[0]
    assert model.complete(STORY).text == expected(STORY)[0]


# Templates


def test_the_template_in_the_models_config_is_used(client: Any) -> None:
    model = client.model("llm_vllm")
    assert model.spec.parameters["chat_template"] == TEMPLATE
    assert model.chat(MESSAGES, max_tokens=16).text == expected(PROMPT)[0]


def test_without_a_template_chat_says_how_to_give_one(client: Any, server: LocalServer) -> None:
    model = client.model("llm_llmapi")
    before = inference_count(server, "llm_llmapi")
    with pytest.raises(ts.ChatTemplateError, match=r"chat_template=.*config\.pbtxt"):
        model.chat(MESSAGES)
    assert inference_count(server, "llm_llmapi") == before


def test_a_template_that_refuses_the_messages_raises(client: Any) -> None:
    template = "{{ raise_exception('only one message, please') if messages | length > 1 }}"
    with pytest.raises(ts.ChatTemplateError, match="only one message, please"):
        client.model("llm_vllm").chat(MESSAGES, chat_template=template)


# Refusals before sending


def test_an_unknown_option_is_refused_naming_the_accepted_ones(
    client: Any, server: LocalServer
) -> None:
    model = client.model("llm_vllm")
    before = inference_count(server, "llm_vllm")
    with pytest.raises(ts.InvalidInputError, match=r"'temprature'.*temperature"):
        model.complete(STORY, temprature=0.2)
    assert inference_count(server, "llm_vllm") == before


def test_tensorrt_llm_needs_max_tokens(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="needs max_tokens"):
        client.model("llm_trtllm").complete(STORY)


def test_a_model_without_text_in_and_out_says_so(client: Any) -> None:
    with pytest.raises(ts.UnsupportedError, match=r"text \(BYTES\) prompt.*custom"):
        client.model("add_sub").complete(STORY)


# A model of the user's own


def test_a_custom_text_model(client: Any) -> None:
    # generator: one response per word of text_input, max_tokens of them.
    model = client.model("generator")
    schema = custom(prompt="text_input", text="text_output")
    answer = model.complete("one two three", max_tokens=3, adapter=schema)
    assert answer.text == "one two three "
    assert answer.finish_reason == "stop"
    chunks = list(model.complete_stream("one two", max_tokens=4))  # found by itself
    assert [chunk.text for chunk in chunks if chunk.text] == ["one ", "two ", "one ", "two "]


# The OpenAI-shaped mirror


def test_chat_completions_create_on_the_native_route(client: Any) -> None:
    answer = client.chat.completions.create(
        model="llm_vllm", messages=MESSAGES, chat_template=TEMPLATE, max_tokens=16
    )
    assert answer.text == expected(PROMPT)[0]
    chunks = list(
        client.chat.completions.create(
            model="llm_vllm", messages=MESSAGES, max_tokens=16, stream=True
        )
    )
    assert "".join(chunk.text for chunk in chunks) == answer.text
    completion = client.completions.create(model="llm_trtllm", prompt=STORY, max_tokens=2)
    assert completion.text == expected(STORY, max_tokens=2)[0]


@pytest.fixture(scope="module")
def standin(server: LocalServer) -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(server.http_url, TEMPLATE) as running:
        yield running


def test_the_openai_route_gives_the_same_types(make_client: Any, standin: OpenAIStandIn) -> None:
    client = make_client(openai_url=standin.url, route="openai")
    answer = client.chat.completions.create(model="llm_vllm", messages=MESSAGES, max_tokens=16)
    assert isinstance(answer, ts.ChatCompletion)
    assert answer.text == expected(PROMPT)[0]  # the frontend rendered the same template
    assert answer.usage == ts.Usage(len(PROMPT.split()), 8)
    chunks = list(
        client.chat.completions.create(
            model="llm_vllm", messages=MESSAGES, max_tokens=16, stream=True
        )
    )
    assert all(isinstance(chunk, ts.ChatCompletionChunk) for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(chunk.text for chunk in chunks) == answer.text
    assert chunks[-1].usage == answer.usage
    completion = client.completions.create(model="llm_vllm", prompt=STORY, max_tokens=3)
    assert isinstance(completion, ts.Completion)
    assert completion.text == expected(STORY, max_tokens=3)[0]
    assert standin.received[-1][0] == "/v1/completions"
    # Chat's newer name for the limit: OpenAI's completions know only max_tokens.
    completion = client.completions.create(model="llm_vllm", prompt=STORY, max_completion_tokens=2)
    assert completion.text == expected(STORY, max_tokens=2)[0]


@pytest.mark.parametrize("route", ["native", "openai"])
def test_stream_options_say_whether_a_stream_ends_with_its_usage(
    make_client: Any, standin: OpenAIStandIn, route: str
) -> None:
    client = make_client(openai_url=standin.url, route=route)
    template = {"chat_template": TEMPLATE} if route == "native" else {}
    call = {"model": "llm_vllm", "messages": MESSAGES, "max_tokens": 2, "stream": True}
    without = list(
        client.chat.completions.create(**call, **template, stream_options={"include_usage": False})
    )
    assert without
    assert all(chunk.usage is None and chunk.choices for chunk in without)
    with_usage = list(
        client.chat.completions.create(**call, **template, stream_options={"include_usage": True})
    )
    assert with_usage[-1].usage == ts.Usage(len(PROMPT.split()), 2)
    assert "".join(c.text for c in without) == "".join(c.text for c in with_usage)
    chunks = list(
        client.completions.create(
            model="llm_vllm",
            prompt=STORY,
            max_tokens=2,
            stream=True,
            stream_options={"include_usage": False},
        )
    )
    assert chunks
    assert all(chunk.usage is None for chunk in chunks)
    served = len(standin.received)
    for bad in ({"include_usage": 1}, {"continuous_usage_stats": True}, ["include_usage"]):
        with pytest.raises(ts.InvalidInputError, match="include_usage"):
            client.chat.completions.create(**call, **template, stream_options=bad)
    with pytest.raises(ts.InvalidInputError, match="stream=True only"):
        client.chat.completions.create(
            **{**call, "stream": False}, **template, stream_options={"include_usage": True}
        )
    assert len(standin.received) == served  # refused before sending


def test_auto_sends_tool_calling_requests_to_the_frontend(
    make_client: Any, standin: OpenAIStandIn
) -> None:
    client = make_client(openai_url=standin.url)
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    served = len(standin.received)
    client.chat.completions.create(
        model="llm_vllm", messages=MESSAGES, chat_template=TEMPLATE, max_tokens=4
    )
    assert len(standin.received) == served  # no tools: the native route
    # "none": the stand-in, as the frontend without --tool-call-parser, parses no tool calls
    answer = client.chat.completions.create(
        model="llm_vllm", messages=MESSAGES, tools=tools, tool_choice="none", max_tokens=4
    )
    path, body = standin.received[-1]
    assert path == "/v1/chat/completions"
    assert body["tools"] == tools
    assert answer.finish_reason == "stop"


def test_auto_keeps_a_call_with_a_chat_template_on_the_native_route(
    make_client: Any, standin: OpenAIStandIn
) -> None:
    client = make_client(openai_url=standin.url)
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    served = len(standin.received)
    # (went to the frontend, which refused: chat_template applies to the native route)
    answer = client.chat.completions.create(
        model="llm_vllm", messages=MESSAGES, tools=tools, chat_template=TEMPLATE, max_tokens=4
    )
    assert len(standin.received) == served
    assert answer.text == expected(PROMPT, max_tokens=4)[0]


@pytest.mark.parametrize("route", ["native", "openai"])
def test_a_malformed_call_is_refused_before_sending_on_both_routes(
    make_client: Any, standin: OpenAIStandIn, route: str
) -> None:
    client = make_client(openai_url=standin.url, route=route)
    template = {"chat_template": TEMPLATE} if route == "native" else {}
    call = {"model": "llm_vllm", **template}
    served = len(standin.received)
    refusals = [
        ({"messages": MESSAGES, "max_tokens": 2, "max_completion_tokens": 2}, "give one"),
        ({"messages": ["hi"]}, "message 0 is a str"),
    ]
    if route == "openai":
        refusals += [
            ({"messages": [{"role": "user", "content": object()}]}, "cannot be sent as JSON"),
            ({"messages": MESSAGES, "temperature": float("nan")}, "cannot be sent as JSON"),
            ({"messages": "hi"}, "messages is a list of mappings"),
            ({"messages": MESSAGES, "tools": ["now"]}, "tool 0 is a str"),
            ({"messages": MESSAGES, "tools": {"type": "function"}}, "tools is a list"),
        ]
    else:
        refusals += [
            ({"messages": MESSAGES, "chat_template_kwargs": ["x"]}, "chat_template_kwargs"),
            ({"messages": MESSAGES, "chat_template": 5}, "chat_template is Jinja source"),
        ]
    for arguments, message in refusals:
        with pytest.raises(ts.InvalidInputError, match=message):
            client.chat.completions.create(**{**call, **arguments})
    assert len(standin.received) == served


def test_the_openai_route_raises_the_same_errors(make_client: Any, standin: OpenAIStandIn) -> None:
    client = make_client(openai_url=standin.url, route="openai")
    with pytest.raises(ts.ModelNotFoundError, match="Unknown model: nope"):
        client.chat.completions.create(model="nope", messages=MESSAGES)
    with pytest.raises(ts.ModelNotFoundError):  # a stream's refusal comes at once too
        client.chat.completions.create(model="nope", messages=MESSAGES, stream=True)
    with pytest.raises(ts.InferenceError, match=r"n=1\) is currently supported") as caught:
        client.chat.completions.create(model="llm_vllm", messages=MESSAGES, n=2)
    assert caught.value.status == 400
    with pytest.raises(ts.InferenceError, match="before \\[DONE\\]"):
        list(client.completions.create(model="llm_vllm", prompt="please explode", stream=True))
    with pytest.raises(ts.UnsupportedError, match="native route"):
        client.chat.completions.create(model="llm_vllm", messages=MESSAGES, chat_template=TEMPLATE)


class Seen(ts.CallHook):
    """Each hook method's name and call, and a header of the hook's own on each request."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def before_send(self, op: Any, ctx: ts.CallContext) -> None:
        self.events.append(("before_send", ctx.call))
        ctx.headers = {**ctx.headers, "authorization": "Bearer rotated"}

    def after_receive(self, op: Any, ctx: ts.CallContext, result: object) -> None:
        self.events.append(("after_receive", ctx.call))

    def on_error(self, op: Any, ctx: ts.CallContext, error: ts.TritonError) -> None:
        self.events.append(("on_error", ctx.call))

    def on_end(self, op: Any, ctx: ts.CallContext) -> None:
        self.events.append(("on_end", ctx.call))


def test_hooks_see_the_openai_route(make_client: Any, standin: OpenAIStandIn) -> None:
    # It went around the hooks: no span, no log line, no header a hook adds (a token).
    seen = Seen()
    client = make_client(openai_url=standin.url, route="openai", hooks=[seen])
    client.chat.completions.create(model="llm_vllm", messages=MESSAGES, max_tokens=2)
    assert seen.events == [
        ("before_send", "openai"),
        ("after_receive", "openai"),
        ("on_end", "openai"),
    ]
    assert standin.headers[-1]["authorization"] == "Bearer rotated"
    seen.events.clear()
    chunks = list(
        client.completions.create(model="llm_vllm", prompt=STORY, max_tokens=2, stream=True)
    )
    assert seen.events == [
        ("before_send", "openai_stream"),
        *[("after_receive", "openai_stream")] * len(chunks),
        ("on_end", "openai_stream"),
    ]
    seen.events.clear()
    with pytest.raises(ts.ModelNotFoundError):
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert seen.events == [("before_send", "openai"), ("on_error", "openai"), ("on_end", "openai")]


def test_numpy_options_on_the_openai_route(make_client: Any, standin: OpenAIStandIn) -> None:
    # The body failed to serialize (a TypeError reported as the server's bad answer).
    client = make_client(openai_url=standin.url, route="openai")
    answer = client.chat.completions.create(
        model="llm_vllm", messages=MESSAGES, max_tokens=np.int64(2)
    )
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2
    assert standin.received[-1][1]["max_tokens"] == 2


@pytest.mark.parametrize(
    ("openai_url", "expected"),
    [
        ("http://user:secret@127.0.0.1:9000/v1", "credentials"),
        ("http://127.0.0.1:9000/v1?token=secret", "query"),
        ("ftp://127.0.0.1/v1", "OpenAI-compatible frontend's URL"),
        (9000, "must be a str"),
    ],
)
def test_an_openai_url_that_cannot_be_used_is_refused_when_the_client_is_made(
    url: str, openai_url: Any, expected: str
) -> None:
    # It was taken as given: its secrets then showed in error messages, a query was
    # mangled into the path, a number raised AttributeError.
    with pytest.raises(ts.InvalidInputError, match=expected) as caught:
        ts.Client(url, openai_url=openai_url)
    assert "secret" not in str(caught.value)


def test_the_openai_route_needs_its_url(client: Any) -> None:
    with pytest.raises(ts.InvalidInputError, match="openai_url"):
        client.chat.completions.create(model="llm_vllm", messages=MESSAGES, route="openai")
